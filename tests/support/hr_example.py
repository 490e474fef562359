"""The bundled HR example (examples/hr.sqlite under examples/hr_policy.toml) as the tests and
benchmarks compile it: one place for "the guide of a role of the example"."""

from __future__ import annotations

from pathlib import Path

import gridrail as gr

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HR_DB = EXAMPLES / "hr.sqlite"
HR_POLICY = EXAMPLES / "hr_policy.toml"


def hr_guide(
    vocab: gr.Vocabulary,
    role: str = "analyst",
    profile: gr.GenerationProfile | None = None,
    schema: gr.Schema | None = None,
    gamma: bool = False,
    declared_names: bool = False,
) -> gr.Guide:
    """The guide of `role` over the example's schema, or `schema` (`profile` and `gamma`: what
    `gridrail ask` adds)."""
    return gr.compile(
        gr.Grammar.bundled("sqlite"),
        vocab,
        schema=schema or gr.Schema.from_sqlite(HR_DB),
        policy=gr.Policy.from_file(HR_POLICY),
        role=role,
        profile=profile,
        gamma=gamma,
        declared_names=declared_names,
    )
