"""The conformance scenarios: docs/http.rst's behaviour table, judged from the outside.

Each scenario sends requests through a :class:`Transport` (HTTP for the command line,
Django's test client for a test suite) and returns a :class:`Result`: a verdict
(``pass``, ``fail`` or ``not run``), the evidence it rests on, and warnings. Nothing
here reads the server's database. Executions are counted, never inferred from what an
answer claims: through the id each answer carries (the JSON field ``id_field``),
compared with the first answer's; through the gap between the ids of fresh requests
made before and after; and, when given, through an ``executions`` counter (a callable,
or ``--count-url``) read before and after each scenario. ``Idempotent-Replayed`` is
reported, not trusted. A scenario whose pass rests on counting (nothing ran, one
execution per key) is ``not run`` when neither the ids (integers that grow) nor a
counter can count: a same id proves nothing when the first body is replayed.

Two profiles: ``strict`` judges this library's contract (docs/http.rst); ``draft`` the
IETF draft (draft-ietf-httpapi-idempotency-key-header), whose recommendations
(problem+json, ``Retry-After``, a replay header, a byte-identical replay) are then
warnings, not failures. Under ``draft`` nothing of this library's dialect is sent (the
marked retry's ``Idempotency-Retry``, the test hooks) unless asked for.

Effects first: each scenario states the executions it causes, and one it did not expect,
counted, fails it even where its answers could not be judged. Whatever a scenario meets
(a transport's :class:`TimedOut`, a counter that fails, a bug), it ends with a result.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from idempotency_django.conformance.headers import (
    FAIL_HEADER,
    HOLD_HEADER,
    MARKER_HEADER,
    RETRY_HEADER,
)

PASS, FAIL, NOT_RUN = "pass", "fail", "not run"
TIMEOUT = "timeout"  # a request outlasted the transport's timeout: nothing judged
ERROR = "error"  # the runner itself failed on what it met: nothing judged
UNPASSED = frozenset({FAIL, TIMEOUT, ERROR})  # a run with any of these exits 1
REPLAYED = "idempotent-replayed"
PROBLEM = "application/problem+json"
KEY_HEADER = "Idempotency-Key"
TRANSIENT_4XX = frozenset({408, 409, 425, 429})
REFUSALS = frozenset({401, 403})  # answered before any claim, never stored
OVERSIZED = 300  # over any allowed IDEMPOTENCY_KEY_MAX_LENGTH (the column holds 255)
DEFAULT_BODY: dict[str, Any] = {"amount": 100, "currency": "eur"}
STRICT, DRAFT = "strict", "draft"
PROFILES = (STRICT, DRAFT)
KEY_FORMATS = ("token", "uuid")
HOOKS_NEEDED = (
    "needs the test hooks (conformance_hooks under the protection and "
    "IDEMPOTENCY_CONFORMANCE_HOOKS = True; docs/verify.rst)"
)
COUNT_NEEDED = "needs integer ids in --id-field, or --count-url"
DRAFT_NO_HOOKS = (
    "; the draft defines no hooks: they are sent under --profile strict, or with --hooks"
)


@dataclass(frozen=True)
class Answer:
    """One HTTP answer; ``status`` 0 when none came (``error`` says why)."""

    status: int
    headers: Mapping[str, str]  # names in lower case
    body: bytes
    error: str = ""
    note: str = ""  # how the transport got it, when that matters (a new connection)

    @property
    def replayed(self) -> bool:
        return self.headers.get(REPLAYED, "").lower() == "true"

    @property
    def problem(self) -> bool:
        return self.headers.get("content-type", "").split(";")[0].strip() == PROBLEM

    @property
    def hooked(self) -> bool:
        return MARKER_HEADER.lower() in self.headers

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def show(self) -> str:
        if not self.status:
            return f"no answer ({self.error})"
        flag = " [replayed]" if self.replayed else ""
        text = self.body[:160].decode("utf-8", "replace")
        return f"{self.status}{flag} {text}" + (f" ({self.note})" if self.note else "")


class TimedOut(Exception):
    """Raised by a transport when a request outlasts its timeout: the message says which
    setting to raise and how long the request took."""


class Transport(Protocol):
    """How scenarios reach the endpoint: one POST, with the caller's credentials added."""

    @property
    def concurrent(self) -> bool:
        """May requests be sent from several threads at once."""

    @property
    def has_other_caller(self) -> bool: ...

    @property
    def in_process(self) -> bool:
        """Do the endpoint's hooks run in this process (a hold is released by event, not time)."""

    def send(
        self, headers: Mapping[str, str | bytes], body: bytes, *, other: bool = False
    ) -> Answer:
        """POST ``body`` with ``headers`` as the main caller (or the other one)."""
        ...


Progress = Callable[[str], None]


@dataclass
class Options:
    """What a run varies: the body, where the id lives, the storm's size, the bounds."""

    body: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_BODY))
    id_field: str = "id"
    header: str = KEY_HEADER
    key_format: str = "token"  # "token": conformance-<uuid4>; "uuid": a plain uuid4
    profile: str = STRICT
    storm_keys: int = 4
    storm_duplicates: int = 6
    storm_threads: int = 24
    hold: float = 2.0  # seconds a held request waits when the runner cannot release it
    patience: float = 10.0  # how long an in-process rendezvous may take before it is a failure
    executions: Callable[[], int] | None = None
    progress: Progress | None = None
    # This library's dialect: None sends it under strict only; True or False, always or never.
    marked_retry: bool | None = None  # retries marked with Idempotency-Retry, as our client does
    hooks: bool | None = None  # the test hooks (Idempotency-Test-Fail, -Hold)


@dataclass
class Result:
    """One scenario's verdict and evidence."""

    name: str
    verdict: str
    evidence: list[str] = field(default_factory=list)
    requests: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "verdict": self.verdict,
            "evidence": self.evidence,
            "requests": self.requests,
            "warnings": self.warnings,
        }


class Failed(Exception):
    """A scenario's rule is broken: the message is the evidence."""


class Skipped(Exception):
    """A scenario cannot be judged here: the message says why."""


class Run:
    """The state one run shares between its scenarios: transport, options, counts."""

    def __init__(self, transport: Transport, options: Options) -> None:
        self.transport, self.options = transport, options
        self.sent = 0
        self._counting = threading.Lock()
        self.hooks: bool | None = None  # learnt by the transient-5xx scenario
        self.notes: list[str] = []
        self.warnings: list[str] = []
        self.breaches: list[str] = []  # recommendations broken under strict
        # Executions the current scenario should have caused; None: it cannot tell.
        self.expected: int | None = 0
        # Why the current scenario's executions could not be counted: its pass is "not run".
        self.uncounted = ""
        self.count_failed = ""  # why the executions counter failed during this scenario
        self.created = False  # has a fresh key created yet: then the key format is accepted

    def begin(self) -> None:
        """A new scenario: forget the last one's evidence and expectations."""
        self.notes, self.warnings, self.breaches, self.expected = [], [], [], 0
        self.uncounted = self.count_failed = ""

    def speaks(self, asked: bool | None) -> bool:
        """Whether to send one of this library's extensions: as ``asked``, else under strict."""
        return self.options.profile == STRICT if asked is None else asked

    # -- requests ----------------------------------------------------------------------------

    def body(self, variant: int = 0) -> bytes:
        data = dict(self.options.body)
        if variant:
            amount = data.get("amount")
            if isinstance(amount, int) and not isinstance(amount, bool):
                data["amount"] = amount + variant
            else:
                data["conformance_variant"] = variant
        return json.dumps(data).encode()

    def post(
        self,
        key: str | bytes | None,
        body: bytes | None = None,
        *,
        other: bool = False,
        extra: Mapping[str, str] | None = None,
    ) -> Answer:
        headers: dict[str, str | bytes] = {"Content-Type": "application/json", **(extra or {})}
        if key is not None:
            headers[self.options.header] = key
        with self._counting:
            self.sent += 1
        payload = self.body() if body is None else body
        return self.transport.send(headers, payload, other=other)

    def ident(self, answer: Answer) -> Any:
        """The id of what the answer says was created, or None."""
        data = answer.json()
        for part in self.options.id_field.split("."):
            if not isinstance(data, dict) or part not in data:
                return None
            data = data[part]
        return data

    def executions(self) -> int | None:
        """The counter's reading; None without one, or once it failed in this scenario."""
        count = self.options.executions
        if count is None or self.count_failed:
            return None
        try:
            return count()
        except Exception as error:  # noqa: BLE001 - the caller's counter: whatever it raises is reported
            self.count_failed = str(error) or type(error).__name__
            return None

    def note(self, text: str) -> None:
        self.notes.append(text)

    def expect(self, executions: int) -> None:
        """The current scenario causes ``executions`` more (unless it cannot tell)."""
        if self.expected is not None:
            self.expected += executions

    def recommend(self, kept: bool, broken: str) -> None:
        """A rule the draft only recommends: a failure under ``strict``, a warning under ``draft``.

        Under ``strict`` the failure waits for the scenario's end, so that what the effects
        show (a second execution) is the evidence when both are broken.
        """
        if kept:
            return
        if self.options.profile == DRAFT:
            self.warnings.append(broken)
        else:
            self.breaches.append(
                f"{broken} (the draft recommends it, this library's contract requires it)"
            )

    def new_key(self) -> str:
        return new_key(self.options.key_format)

    def create(self, key: str | None = None) -> tuple[str, Answer, Any]:
        """A fresh execution: ``(key, answer, id)``; :class:`Failed` if none came."""
        key = key or self.new_key()
        answer = self.post(key)
        ident = self.ident(answer)
        if not 200 <= answer.status < 300 or answer.replayed or ident is None:
            raise Failed(f"a fresh key did not create: {answer.show()}{diagnose(answer, self)}")
        self.expect(1)
        self.created = True
        return key, answer, ident


def new_key(key_format: str = "token") -> str:
    plain = str(uuid.uuid4())
    return plain if key_format == "uuid" else f"conformance-{plain}"


def diagnose(answer: Answer, run: Run) -> str:
    """A hint for the commonest reasons a first request fails."""
    data = answer.json()
    kind = str(data.get("type", "")) if isinstance(data, dict) else ""
    if kind.endswith("#key-missing"):
        return (
            f" — the server saw no {run.options.header}: a proxy or load balancer dropped it, "
            "or the server reads another header (IDEMPOTENCY_HEADER)"
        )
    if answer.status in REFUSALS:
        return " — refused: pass the caller's credentials with --header"
    if 200 <= answer.status < 300 and run.ident(answer) is None:
        return f" — no {run.options.id_field!r} field in the answer: name it with --id-field"
    if answer.status == 0:
        return " — the server did not answer"
    if answer.status in (400, 500) and run.options.key_format != "uuid" and not run.created:
        return (
            " — if the server accepts only UUID keys (its key column a UUID), "
            "send plain ones with --key-format uuid"
        )
    return ""


# --- the scenarios ------------------------------------------------------------------------------


def replay(run: Run) -> None:
    """A retry with the same key and body replays the first answer and creates nothing;
    under strict (or ``marked_retry``) first marked as the Python client marks its retries
    (``Idempotency-Retry``, which the draft does not define), then not."""
    key, first, ident = run.create()
    before = run.executions()
    run.note(f"first: {first.show()}")
    # The marked retry first: the unmarked one's replay may fill a replay cache, which
    # would then answer the marked one before the server's early lookup.
    marked = [("marked retry", {RETRY_HEADER: "1"})] if run.speaks(run.options.marked_retry) else []
    for what, extra in [*marked, ("retry", None)]:
        second = run.post(key, extra=extra)
        run.note(f"{what}: {second.show()}")
        judge_replay(run, f"the {what}", first, ident, second)
    expect_no_execution(run, before, "the retries")
    expect_gap(run, ident, 0, "the retries")
    if not run.uncounted:
        run.note(f"one execution, id {ident!r}")


def judge_replay(run: Run, what: str, first: Answer, ident: Any, again: Answer) -> None:
    """``again`` is ``first`` replayed: same status, no new id; the same bytes and header."""
    if run.ident(again) not in (None, ident):
        raise Failed(f"{what} executed again (new id {run.ident(again)!r}, the first {ident!r})")
    if again.status != first.status:
        raise Failed(f"{what} is not the first answer: {again.show()}")
    same = again.body == first.body and all(
        first.headers.get(name) == again.headers.get(name) for name in ("content-type", "location")
    )
    run.recommend(same, f"{what}'s body, Content-Type or Location differs from the first answer")
    run.recommend(
        again.replayed,
        f"{what} replays the first answer (same id {ident!r}) without 'Idempotent-Replayed: true'",
    )


def ran_again(run: Run, answer: Answer, known: Any = None) -> str:
    """What an answer's id says: a new one (every key here is fresh: it executed), or ``known``."""
    ident = run.ident(answer)
    if ident is None:
        return ""
    if ident == known:
        return f": it carries the first answer's id {ident!r}"
    return f": it executed {'again ' if known is not None else ''}(new id {ident!r})"


def ran_behind(run: Run, before: int | None, what: str) -> str:
    """What the count says behind an answer that shows no run of ``what``: it ran all the
    same (an answer replaying the first one's id hides it), or nothing to add."""
    after = run.executions()
    if before is None or after is None or after == before:
        return ""
    return f"; yet {what} ran: executions went from {before} to {after}"


def expect_no_execution(run: Run, before: int | None, what: str) -> None:
    after = run.executions()
    if before is not None and after is not None and after != before:
        raise Failed(f"{what} ran the view: executions went from {before} to {after}")


def expect_gap(run: Run, before_id: Any, between: int, what: str, *, required: bool = True) -> None:
    """Two fresh requests after ``before_id``: their ids must leave room for ``between`` more.

    Integer ids that grow only, and a quiet server: another client writing meanwhile fails
    this. Other ids count nothing: without a counter the scenario cannot pass
    (``run.uncounted``) where its pass rests on counting (``required``), since the same id
    in a replay proves nothing when the first answer's body is replayed over a second
    execution.
    """
    _, _, after_id = run.create()
    _, _, last_id = run.create()
    run.note(f"ids around {what}: {before_id!r}, then {after_id!r}, {last_id!r}")
    ids = (before_id, after_id, last_id)
    integers = all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
    step = last_id - after_id if integers else 0
    if step <= 0:
        lacking = "growing integers" if integers else "integers"
        if required:
            uncounted(run, what, lacking)
        else:
            run.note(f"the ids are not {lacking}: they cannot count what ran")
        return
    if after_id - before_id != step * (between + 1):
        made = (after_id - before_id) // step - 1
        raise Failed(
            f"{what}: the ids jumped from {before_id} to {after_id} (then {last_id}): {made} "
            f"created in between where {between} should have been (or another client wrote "
            "meanwhile)"
        )


def uncounted(run: Run, what: str, lacking: str) -> None:
    """The ids cannot count ``what``'s executions: the counter must, or the pass is withheld."""
    if run.options.executions is not None:
        run.note(f"the ids are not {lacking}: no id-gap check, the executions counter counts")
    elif not run.uncounted:
        run.uncounted = (
            f"the ids are not {lacking}: the executions around {what} cannot be counted, "
            f"and an answer claiming a replay proves nothing; {COUNT_NEEDED}"
        )


def mismatch(run: Run) -> None:
    """Another body with a used key: 422, nothing runs, nothing revealed."""
    key, first, ident = run.create()
    before = run.executions()
    other = run.post(key, run.body(variant=1))
    run.note(f"another body: {other.show()}")
    if other.status != 422:
        shown = f"expected 422, got {other.show()}{ran_again(run, other, ident)}"
        raise Failed(shown + ran_behind(run, before, "the other body"))
    run.recommend(other.problem, f"the 422 is not problem+json: {other.show()}")
    if other.replayed or run.ident(other) is not None or first.body in other.body:
        raise Failed("the 422 reveals the stored answer")
    expect_no_execution(run, before, "the request with another body")
    again = run.post(key)
    judge_replay(run, "after the 422, the first body's retry", first, ident, again)
    run.note(f"the first body still replays id {ident!r}")
    expect_gap(run, ident, 0, "the request with another body and the retry")


def oversized() -> str:
    return (uuid.uuid4().hex * (OVERSIZED // 32 + 1))[:OVERSIZED]


def bad_key(make: Callable[[], str | bytes] | None, what: str) -> Callable[[Run], None]:
    """``make`` makes the bad key, unique per run: a rerun never meets an earlier run's key."""

    def scenario(run: Run) -> None:
        _, _, before_id = run.create()
        before = run.executions()
        key = None if make is None else make()
        for attempt in (1, 2):
            answer = run.post(key)
            run.note(f"{what}, attempt {attempt}: {answer.show()}")
            if run.options.profile == DRAFT:
                draft_bad_key(run, key, what, answer)
            elif answer.status != 400:
                raise Failed(f"{what}: expected 400, got {answer.show()}{ran_again(run, answer)}")
            run.recommend(answer.problem, f"{what}: the {answer.status} is not problem+json")
            if answer.replayed or run.ident(answer) is not None:
                raise Failed(f"{what}: the 400 carries an id or a replay")
        expect_no_execution(run, before, what)
        expect_gap(run, before_id, 0, what)

    scenario.__doc__ = f"{what}: 400 and nothing runs."
    return scenario


def draft_bad_key(run: Run, key: str | bytes | None, what: str, answer: Answer) -> None:
    """The draft asks 400 only where an operation requires a key, and limits no key's length or
    characters: a bad key accepted is not judged; refused, it must not have run."""
    if 200 <= answer.status < 300:
        rule = (
            "needs an operation that requires a key: this one runs without one, and the draft "
            "asks 400 only of those"
            if key is None
            else "the draft sets no rule for such a key (this library refuses it: --profile strict)"
        )
        # Accepted: it ran, unless the server answered it as a replay of an earlier request
        # (a window of its own, e.g. the same caller and body); the count judges either way.
        run.expect(0 if answer.replayed else 1)
        raise Skipped(f"{what}: {rule}")
    run.recommend(answer.status == 400, f"{what}: answered {answer.status}, not 400")


def storm(run: Run) -> None:
    """N keys x M concurrent duplicates: one execution per key; replays or 409 otherwise."""
    opts = run.options
    _, _, before_id = run.create()
    keys = [run.new_key() for _ in range(opts.storm_keys)]
    jobs = [key for key in keys for _ in range(opts.storm_duplicates)]
    answers = _storm_answers(run, jobs)
    for key in keys:
        _judge_key(run, key, answers[key])
    mode = "concurrent" if run.transport.concurrent else "sequential (the test holds a transaction)"
    run.note(f"{len(jobs)} requests, {mode}: one id per key for {len(keys)} keys")
    run.expect(len(keys))
    expect_gap(run, before_id, len(keys), "the storm")


def _storm_answers(run: Run, jobs: list[str]) -> dict[str, list[Answer]]:
    answers: dict[str, list[Answer]] = {key: [] for key in jobs}
    done = 0

    def report(key: str, answer: Answer) -> None:
        nonlocal done
        answers[key].append(answer)
        done += 1
        if run.options.progress and (done % 5 == 0 or done == len(jobs)):
            run.options.progress(f"storm: {done}/{len(jobs)} answered")

    if not run.transport.concurrent:
        for key in jobs:
            report(key, run.post(key))
        return answers
    threads = max(1, min(run.options.storm_threads, len(jobs)))
    with ThreadPoolExecutor(threads, thread_name_prefix="conformance-storm") as pool:
        for key, answer in zip(jobs, pool.map(run.post, jobs), strict=True):
            report(key, answer)
    return answers


def _judge_key(run: Run, key: str, answers: list[Answer]) -> None:
    """One id for ``key`` across its answers; every other answer a replay of it or a 409."""
    created = [a for a in answers if 200 <= a.status < 300]
    ids = {run.ident(a) for a in created} - {None}
    if len(ids) > 1:
        raise Failed(
            f"key {key}: {len(ids)} different ids {sorted(map(repr, ids))}: executed twice"
        )
    for answer in answers:
        if answer.status == 409:
            expect_retry_after(run, answer)
        elif not (200 <= answer.status < 300):
            raise Failed(f"key {key}: an answer neither a replay nor a 409: {answer.show()}")
    follow = run.post(key)
    if not created:  # every duplicate got 409: the key is free or done, the follow-up says
        if not 200 <= follow.status < 300:
            raise Failed(f"key {key}: after the storm the key does not replay: {follow.show()}")
        return
    first = next((a for a in created if not a.replayed), created[0])
    unmarked = sum(not a.replayed for a in created)
    run.recommend(
        unmarked <= 1,
        f"key {key}: {unmarked} answers with the same id and no 'Idempotent-Replayed: true'",
    )
    run.recommend(
        all(a.body == first.body for a in created), f"key {key}: a replay differs from the first"
    )
    (ident,) = ids or {None}
    judge_replay(run, f"key {key}: the follow-up after the storm", first, ident, follow)


def expect_retry_after(run: Run, answer: Answer) -> None:
    run.recommend(answer.problem, f"a 409 that is not problem+json: {answer.show()}")
    value = answer.headers.get("retry-after", "")
    run.recommend(value.isdigit(), f"a 409 without an integer Retry-After (got {value!r})")


def other_caller(run: Run) -> None:
    """Another caller with the same key and body gets an answer of its own; under the
    draft, a safe refusal (a 4xx, nothing run, nothing of the first answer) passes too."""
    if not run.transport.has_other_caller:
        raise Skipped("needs a second caller's credentials (--other-caller-header)")
    key, first, ident = run.create()
    theirs = run.post(key, other=True)
    run.note(f"first caller: {first.show()}")
    run.note(f"other caller: {theirs.show()}")
    if theirs.replayed or theirs.body == first.body or run.ident(theirs) == ident:
        raise Failed("the other caller got the first caller's answer")
    if 200 <= theirs.status < 300 and run.ident(theirs) is not None:
        run.expect(1)
        return
    if not 400 <= theirs.status < 500:
        raise Failed(f"the other caller's request did not create{diagnose(theirs, run)}")
    _refused_other_caller(run, first, ident, theirs)


def _refused_other_caller(run: Run, first: Answer, ident: Any, theirs: Answer) -> None:
    """A 4xx to the other caller: safe when it reveals nothing, ran nothing, and the other
    caller's credentials do create with a key of its own (else they are what was refused)."""
    if first.body and first.body in theirs.body:
        raise Failed(f"the other caller's {theirs.status} reveals the first caller's answer")
    own = run.post(run.new_key(), other=True)
    run.note(f"other caller, a key of its own: {own.show()}")
    if not 200 <= own.status < 300 or run.ident(own) is None:
        raise Failed(f"the other caller's request did not create{diagnose(own, run)}")
    run.expect(1)
    expect_gap(run, ident, 1, "the other caller's refused request and its own key")
    refused = f"the other caller's use of the key was refused ({theirs.status}), nothing run"
    if run.options.profile == DRAFT:
        run.note(f"{refused}: a safe refusal, which the draft allows")
    else:
        run.breaches.append(
            f"{refused}: this library's contract gives each caller keys of its own "
            "(the draft allows a safe refusal: --profile draft)"
        )


def hooks_offered(run: Run) -> bool:
    """Whether the endpoint offers the test hooks: asked once, and only if they may be sent."""
    if not run.speaks(run.options.hooks):
        return False
    if run.hooks is None:
        probe_hooks(run, run.new_key())
    return bool(run.hooks)


def hooks_needed(run: Run) -> str:
    return HOOKS_NEEDED + ("" if run.speaks(run.options.hooks) else DRAFT_NO_HOOKS)


def probe_hooks(run: Run, key: str) -> Answer:
    """Ask for a 503 with ``key``: whether a hook answered tells if the endpoint offers them."""
    failed = run.post(key, extra={FAIL_HEADER: "503"})
    run.hooks = failed.hooked
    if not failed.hooked and 200 <= failed.status < 300:
        run.expect(1)  # the header ignored, the request ran
    return failed


def transient(run: Run) -> None:
    """A transient failure (503) is not stored: the retry runs afresh."""
    if not run.speaks(run.options.hooks):
        raise Skipped(hooks_needed(run))
    key = run.new_key()
    before = run.executions()
    failed = probe_hooks(run, key)
    if not failed.hooked:
        raise Skipped(f"{HOOKS_NEEDED}: {FAIL_HEADER} was ignored")
    run.note(f"failing request: {failed.show()}")
    if failed.status != 503:
        raise Failed(f"the hook asked for 503, the answer was {failed.show()}")
    expect_no_execution(run, before, "the failed request (its writes were not rolled back)")
    retry = run.post(key)
    run.note(f"retry: {retry.show()}")
    if retry.replayed or retry.status == 503:
        raise Failed("the transient failure was stored and replayed")
    if not 200 <= retry.status < 300 or run.ident(retry) is None:
        raise Failed(f"the retry did not run afresh{diagnose(retry, run)}")
    run.expect(1)


def final_4xx(run: Run) -> None:
    """A final 4xx is stored and replayed like a success."""
    if hooks_offered(run):
        run.expected = None  # whether a refused request's writes stay is the view's business
        key = run.new_key()
        first = _final_refusal(run, key, None, {FAIL_HEADER: "422"})
        retry = run.post(key)
        run.note(f"retry: {retry.show()}")
        if retry.status != first.status or retry.body != first.body:
            raise Failed(f"the final {first.status} was not replayed{ran_again(run, retry)}")
        run.recommend(retry.replayed, "the replayed 4xx carries no 'Idempotent-Replayed: true'")
        return
    # Without hooks or a counter, fresh requests' ids before and after count what ran between.
    before_id = None if run.options.executions else _fresh_id(run)
    base = run.expected or 0
    try:
        _final_4xx_by_array(run)
    except Skipped:  # not judged, but what ran unseen is still counted
        _ids_since(run, before_id, base)
        raise
    _ids_since(run, before_id, base)


def _ids_since(run: Run, before_id: Any, base: int) -> None:
    if before_id is not None:
        between = (run.expected or 0) - base
        expect_gap(run, before_id, between, "the refused requests", required=False)


def _fresh_id(run: Run) -> Any:
    """A fresh request's id, or None: then the ids witness nothing."""
    answer = run.post(run.new_key())
    if not 200 <= answer.status < 300:
        return None
    run.expect(1)
    return None if answer.replayed else run.ident(answer)


def _final_refusal(
    run: Run, key: str, body: bytes | None, extra: Mapping[str, str] | None = None
) -> Answer:
    """The first request, refused: :class:`Skipped` unless with a final 4xx."""
    first = run.post(key, body, extra=extra)
    run.note(f"refused request: {first.show()}")
    if 200 <= first.status < 300:
        run.expect(1)
        raise Skipped(f"the endpoint accepted a JSON array: {hooks_needed(run)}")
    if not 400 <= first.status < 500 or first.status in REFUSALS | TRANSIENT_4XX:
        raise Skipped(f"{first.status} is not a final 4xx: {hooks_needed(run)}")
    return first


def _final_4xx_by_array(run: Run) -> None:
    """Refused for its body (a JSON array, which most create endpoints refuse)."""
    key = run.new_key()
    first = _final_refusal(run, key, b"[]")
    retry = run.post(key, b"[]")
    run.note(f"retry: {retry.show()}")
    if retry.replayed and retry.status == first.status and retry.body == first.body:
        _after_a_stored_refusal(run, key, first)
        return
    _final_4xx_without_hooks(run, key, first, retry)


def _after_a_stored_refusal(run: Run, key: str, first: Answer) -> None:
    """The refusal is stored (replayed): the valid body under its key is another body, and
    must not run (an execution its answer hides is counted: the scenario expects none)."""
    follow = run.post(key)
    run.note(f"valid body, same key: {follow.show()}")
    if 200 <= follow.status < 300 and not follow.replayed:
        raise Failed(
            f"the {first.status} was stored and replayed, yet the valid body then ran under "
            f"the same key{ran_again(run, follow)}"
        )


def _final_4xx_without_hooks(run: Run, key: str, first: Answer, retry: Answer) -> None:
    """Was the refusal stored? Only a follow-up with the valid body and the same key tells."""
    follow = run.post(key)
    run.note(f"valid body, same key: {follow.show()}")
    if 200 <= follow.status < 300 and not follow.replayed:
        run.expect(1)
        raise Skipped(
            f"the {first.status} was not stored (the valid body with its key then created): "
            "it came before the protection (e.g. schema validation outside the protected "
            f"view), or the implementation stores no 4xx; to tell, {hooks_needed(run)}"
        )
    if follow.status not in (409, 422):
        raise Skipped(
            f"the follow-up was refused for another reason ({follow.status}): whether the "
            f"{first.status} was stored cannot be told; {hooks_needed(run)}"
        )
    if retry.status == first.status and retry.body == first.body:
        # The key is taken, but a refusal creates nothing to count: the same answer may
        # be a replay, or the view refusing the same body again.
        raise Skipped(
            f"the key was taken (the valid body then got {follow.status}), but the retry's "
            f"identical {retry.status} carries no replay header, and a refusal creates nothing "
            f"to count: replayed or refused again cannot be told; to tell, {hooks_needed(run)}"
        )
    raise Failed(
        f"the final {first.status} was stored (the valid body then got {follow.status}) "
        "but not replayed"
    )


def in_flight(run: Run) -> None:
    """A duplicate while the first request is still running gets 409 with Retry-After."""
    if not hooks_offered(run):
        raise Skipped(hooks_needed(run))
    if not run.transport.concurrent:
        raise Skipped("needs concurrent requests (a transactional test: transaction=True)")
    if run.transport.in_process:
        _in_flight_by_event(run)
    else:
        _in_flight_by_time(run)


def _in_flight_by_event(run: Run) -> None:
    from idempotency_django.conformance import hooks

    key = run.new_key()
    with ThreadPoolExecutor(2, thread_name_prefix="conformance-hold") as pool:
        held = pool.submit(run.post, key, None, extra={HOLD_HEADER: str(hooks.MAX_HOLD)})
        try:
            if not hooks.wait_entered(key, run.options.patience):
                raise Failed("the held request never reached its view")
            duplicate = pool.submit(run.post, key)
            try:
                second = duplicate.result(run.options.patience)
            except TimeoutError:
                raise Failed("the duplicate waited for the first instead of answering") from None
        finally:
            hooks.release(key)
            first = held.result(run.options.patience + hooks.MAX_HOLD)
            hooks.forget(key)
    _judge_in_flight(run, key, first, second)


def _in_flight_by_time(run: Run) -> None:
    seconds = str(run.options.hold)
    for _ in range(3):
        key = run.new_key()
        with ThreadPoolExecutor(2, thread_name_prefix="conformance-hold") as pool:
            answers = list(
                pool.map(lambda k: run.post(k, extra={HOLD_HEADER: seconds}), [key, key])
            )
        if any(a.status == 409 for a in answers):
            first, second = sorted(answers, key=lambda a: a.status == 409)
            _judge_in_flight(run, key, first, second)
            return
        ids = {run.ident(a) for a in answers if 200 <= a.status < 300} - {None}
        if len(ids) > 1:
            raise Failed(f"both requests executed: {[a.show() for a in answers]}")
        run.expect(len(ids))
        run.note(f"no overlap: {[a.show() for a in answers]}")
    raise Skipped(
        "needs a duplicate in flight: it never arrived while the first was held "
        "(one worker? IDEMPOTENCY_WAIT?)"
    )


def _judge_in_flight(run: Run, key: str, first: Answer, second: Answer) -> None:
    run.note(f"held request: {first.show()}")
    run.note(f"duplicate: {second.show()}")
    if second.status != 409:
        raise Failed(f"the duplicate got {second.show()}, not 409{ran_again(run, second)}")
    expect_retry_after(run, second)
    if not 200 <= first.status < 300:
        raise Failed(f"the held request failed: {first.show()}")
    run.expect(1)
    later = run.post(key)
    judge_replay(run, "once the first finished, the retry", first, run.ident(first), later)


SCENARIOS: Sequence[tuple[str, Callable[[Run], None]]] = (
    ("replay", replay),
    ("mismatch-422", mismatch),
    ("key-missing-400", bad_key(None, "no key")),
    ("key-oversized-400", bad_key(lambda: oversized(), f"a {OVERSIZED}-character key")),
    (
        "key-non-ascii-400",
        bad_key(lambda: f"clé-ünïcode-{uuid.uuid4()}".encode(), "a non-ASCII key"),
    ),
    ("storm", storm),
    ("other-caller", other_caller),
    ("transient-5xx-not-stored", transient),
    ("final-4xx-replayed", final_4xx),
    ("in-flight-409", in_flight),
)
NAMES = tuple(name for name, _ in SCENARIOS)


def run_scenarios(
    transport: Transport, options: Options, only: Sequence[str] | None = None
) -> list[Result]:
    """Every scenario (or those named in ``only``), in order; one result each."""
    run = Run(transport, options)
    results = []
    for name, scenario in SCENARIOS:
        if only is not None and name not in only:
            continue
        results.append(judge(run, name, scenario))
    return results


def judge(run: Run, name: str, scenario: Callable[[Run], None]) -> Result:
    """Run one scenario: whatever it meets, a result (a timeout and a runner's error too)."""
    run.begin()
    start, sent = time.monotonic(), run.sent
    if run.options.progress:
        run.options.progress(f"{name} …")
    try:
        verdict, evidence = _verdict(run, scenario, run.executions())
    except TimedOut as timed_out:
        verdict, evidence = TIMEOUT, [*run.notes, str(timed_out)]
    except Exception as error:  # noqa: BLE001 - a run ends with its table, whatever it met
        kind = type(error).__name__
        verdict, evidence = ERROR, [*run.notes, f"the runner could not judge: {kind}: {error}"]
    evidence.append(f"{run.sent - sent} requests in {time.monotonic() - start:.1f} s")
    return Result(name, verdict, evidence, run.sent - sent, collapse(run.warnings))


def _verdict(
    run: Run, scenario: Callable[[Run], None], before: int | None
) -> tuple[str, list[str]]:
    try:
        scenario(run)
        evidence = list(run.notes)
        counted(run, before, evidence)
        if run.breaches:
            raise Failed(run.breaches[0])
        if run.count_failed:  # the pass would rest on a count that could not be read
            raise Skipped(f"the effects could not be counted: {run.count_failed}")
        if run.uncounted:  # nothing the answers show is broken, but the pass rests on counting
            raise Skipped(run.uncounted)
    except Failed as failed:
        return FAIL, [*run.notes, *effects(run, before), str(failed)]
    except Skipped as skipped:
        try:  # effects first: an execution nobody expected fails what could not be judged
            counted(run, before, [])
        except Failed as failed:
            return FAIL, [*run.notes, str(failed)]
        return NOT_RUN, [*run.notes, str(skipped)]
    return PASS, evidence


# What differs between warnings alike: a key, an id, a count, how the transport got it.
_VARYING = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\d+| \(on a new connection, [^)]*\)"
)


def collapse(warnings: Sequence[str]) -> list[str]:
    """Warnings alike but for a key or a number: one line, the first of them, with a count."""
    alike: dict[str, list[str]] = {}
    for warning in warnings:
        alike.setdefault(_VARYING.sub("#", warning), []).append(warning)
    return [group[0] + (f" ({len(group)} times)" if group[1:] else "") for group in alike.values()]


def effects(run: Run, before: int | None) -> list[str]:
    after = None if before is None else run.executions()
    if run.count_failed:
        return [f"the effects could not be counted: {run.count_failed}"]
    return [] if before is None or after is None else [f"{after - before} effects counted"]


def counted(run: Run, before: int | None, evidence: list[str]) -> None:
    """The effects counted across a passing scenario against those it caused: :class:`Failed`."""
    after = run.executions()
    if before is None or after is None:
        return
    made, expected = after - before, run.expected
    if expected is None:
        evidence.append(f"{made} effects counted (this scenario cannot tell how many to expect)")
        return
    line = f"{made} effects counted, {expected} expected"
    if made != expected:
        raise Failed(f"{line}: something ran that no answer shows")
    evidence.append(line)


def failures(results: Sequence[Result]) -> Iterator[Result]:
    """The results that did not pass and were judged, or could not be: exit status 1."""
    return (r for r in results if r.verdict in UNPASSED)
