-- The store every peer app writes and the judge reads (the Django apps' models make the same).
-- charges: one row per time the view ran (status 201: it created; 400: it refused the body).
-- calls: one row per POST /charges/ answered (and the id its answer names), written by the
-- app's outermost layer.
CREATE TABLE charges (
    id bigserial PRIMARY KEY, amount integer, key text, caller text NOT NULL,
    status integer NOT NULL, at double precision NOT NULL
);
CREATE TABLE calls (
    id bigserial PRIMARY KEY, key text, caller text NOT NULL,
    status integer NOT NULL, answer_id bigint, at double precision NOT NULL
);
