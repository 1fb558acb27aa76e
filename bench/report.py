"""One table on stdout and the same figures as JSON."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.measure import Series


@dataclass
class Row:
    """One figure: ``value`` in ``unit``; ``spread`` is the range of its round medians."""

    key: str
    label: str
    value: float
    unit: str
    spread: tuple[float, float] | None = None
    note: str = ""


@dataclass
class Target:
    """A figure held against a goal from the issue: ``value <= goal`` or ``value >= goal``."""

    key: str
    label: str
    value: float
    unit: str
    goal: float
    at_most: bool

    @property
    def met(self) -> bool:
        return self.value <= self.goal if self.at_most else self.value >= self.goal

    @property
    def goal_text(self) -> str:
        return f"{'<=' if self.at_most else '>='} {_number(self.goal, self.unit)}"


@dataclass
class Report:
    meta: dict[str, Any]
    sections: dict[str, list[Row]] = field(default_factory=dict)
    targets: list[Target] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def add(self, section: str, row: Row) -> None:
        self.sections.setdefault(section, []).append(row)

    def timing(self, section: str, key: str, label: str, series: Series, note: str = "") -> None:
        """Add a series measured in seconds, shown in milliseconds."""
        low, high = series.spread
        row = Row(key, label, series.median * 1e3, "ms", (low * 1e3, high * 1e3), note)
        self.add(section, row)

    def ratio(self, section: str, key: str, label: str, series: Series, note: str = "") -> None:
        self.add(section, Row(key, label, series.median, "x", series.spread, note))

    def target(self, target: Target) -> None:
        self.targets.append(target)

    def render(self) -> str:
        lines = [_title(self.meta), f"{'':2}{'figure':<58}{'median':>12}  {'rounds':<19}note"]
        for section, rows in self.sections.items():
            lines.append(f"-- {section}")
            lines.extend(_row(row) for row in rows)
        if self.targets:
            lines.append("-- targets (issues 10 and 13)")
            lines.extend(_target(target) for target in self.targets)
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "meta": self.meta,
            "sections": {
                name: [asdict(row) for row in rows] for name, rows in self.sections.items()
            },
            "targets": [
                {**asdict(t), "met": t.met, "goal_text": t.goal_text} for t in self.targets
            ],
            **self.extra,
        }

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.as_json(), indent=2) + "\n")


def _title(meta: dict[str, Any]) -> str:
    return (
        f"idempotency_django benchmark: PostgreSQL {meta.get('postgresql', '?')}, "
        f"{meta.get('cpus', '?')} CPUs, load {meta.get('load_before', '?')} -> "
        f"{meta.get('load_after', '?')}; {meta.get('rounds', '?')} rounds, "
        "median of round medians (range of round medians)"
    )


def _number(value: float, unit: str) -> str:
    if math.isnan(value):
        return "-"  # not measured: the row's note says why
    if unit == "ms":
        return f"{value:.3f} ms"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "%":
        return f"{value:.0f} %"
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "MB":
        return f"{value:,.0f} MB"
    number = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"
    return f"{number} {unit}".strip()


_DIGITS = {"ms": 3, "x": 2, "%": 0, "s": 2}


def _row(row: Row) -> str:
    spread = ""
    if row.spread is not None:
        low, high = row.spread
        digits = _DIGITS.get(row.unit, 2)
        spread = f"{low:.{digits}f} to {high:.{digits}f}"
    return f"{'':2}{row.label:<58}{_number(row.value, row.unit):>12}  {spread:<19}{row.note}"


def _target(target: Target) -> str:
    verdict = "met" if target.met else "MISSED"
    value = _number(target.value, target.unit)
    return f"{'':2}{target.label:<58}{value:>12}  {target.goal_text:<19}{verdict}"
