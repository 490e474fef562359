"""Schema linking (gridrail/linking.py): the prompt shows the tables a question is about, only
among those the role sees, while the mask still allows every name the role may see."""

from __future__ import annotations

from functools import cache

import pytest

import gridrail as gr
from gridrail.ask import question_prompt
from gridrail.linking import TableIndex, link_tables, stems
from gridrail.policy.schema import Schema
from gridrail.policy.view import SchemaView
from gridrail.prompt import question_messages
from support.hr_example import hr_guide
from test_walk_arm import _small_vocab


def test_names_and_questions_meet_as_stems():
    assert stems("OrderItems_2") == {"order", "item"}
    assert stems("customer_addresses") == {"customer", "address"}
    assert stems("How many categories does each employee have?") == {"category", "employee"}
    assert stems("ID of the class") == {"class"}  # short words and question words never count


CATALOG = Schema.from_tables(
    "sqlite",
    {
        "flights": ["id", "origin", "destination"],
        "airports": ["code", "city", "country"],
        "employees": ["id", "name", "salary"],
        "payroll_runs": ["id", "run_date", "amount"],
        "aircraft": ["id", "model", "seats"],
    },
)


def _names(tables) -> list[str]:
    return [t.name for t in tables]


def test_the_question_s_tables_come_first_in_catalog_order():
    view = SchemaView(CATALOG, None)
    assert _names(link_tables(view, "Which airports are in France?", 1)) == ["airports"]
    # a table's own word outweighs a column's; ties keep catalog order
    assert _names(link_tables(view, "Seats of each aircraft and its flights", 2)) == [
        "flights",
        "aircraft",
    ]
    assert _names(link_tables(view, "What is the salary of Ann?", 1)) == ["employees"]
    assert _names(link_tables(view, "hello", 2)) == ["flights", "airports"]  # no word shared
    assert link_tables(view, "anything", 5) == view.tables  # all fit: nothing to choose
    with pytest.raises(ValueError):
        link_tables(view, "q", 0)


def test_a_rare_word_outweighs_a_common_one():
    index = TableIndex(SchemaView(CATALOG, None))
    # "id" is too short to count; every table but airports has it anyway. "run" is rarer than
    # "city": the payroll table wins although both are column words
    assert _names(index.link("the run date and amount", 1)) == ["payroll_runs"]


@cache
def _analyst() -> gr.Guide:
    return hr_guide(_small_vocab(), "analyst")


def test_linking_chooses_only_among_what_the_role_sees():
    view = _analyst().view
    assert "salaries" not in _names(view.tables)
    chosen = link_tables(view, "What are the salaries of the employees?", 1)
    assert _names(chosen) == ["employees"]
    system = question_messages(view, "q", tables=chosen)[0]["content"]
    assert "CREATE TABLE employees (" in system
    assert "orders" not in system and "salaries" not in system


def test_the_prompt_narrows_the_mask_does_not():
    guide = _analyst()
    shown = link_tables(guide.view, "How many orders are there?", 1)
    assert _names(shown) == ["orders"]
    # a table the prompt left out is still a sentence of the role's language
    assert not [v for v in guide.check("SELECT name FROM employees_public;")]


class _Templated:
    """Enough of a LanguageModel for `question_prompt`: the chat rendered as text bytes."""

    def prompt_ids(self, messages, prefix=""):
        text = "".join(m["content"] for m in messages) + prefix
        return list(text.encode())


def test_question_prompt_links_unless_told_to_show_everything():
    guide = _analyst()
    view = guide.view
    linked = bytes(question_prompt(_Templated(), guide, "How many orders?", prompt_tables=1))
    every = bytes(question_prompt(_Templated(), guide, "How many orders?", prompt_tables=None))
    assert b"CREATE TABLE orders" in linked and b"CREATE TABLE employees" not in linked
    assert all(f"CREATE TABLE {t.name}".encode() in every for t in view.tables)


def test_coverage_counts_the_questions_words_the_statements_names_hold() -> None:
    index = TableIndex(_analyst().view)
    question = "How many employees are in each department?"
    by_dept = index.coverage(question, "SELECT dept, COUNT(*) FROM employees GROUP BY dept;")
    by_manager = index.coverage(question, "SELECT manager_id FROM employees GROUP BY manager_id;")
    assert by_dept > by_manager > 0  # `dept` abbreviates department; both name employees
    # an alias or a string is no name of the schema: it speaks to nothing
    assert index.coverage(question, "SELECT 1 AS department FROM orders;") == 0
    assert index.coverage("", "SELECT dept FROM employees;") == 0
    # an invented name made of schema words is no schema name either (it used to count)
    invented = "SELECT COUNT(*) AS employees_dept FROM orders;"
    assert index.coverage(question, invented) == index.coverage(question, "SELECT 1 FROM orders;")
    # quoted and differently cased names are the same names
    quoted = 'SELECT "Dept", COUNT(*) FROM [employees] GROUP BY "Dept";'
    assert index.coverage(question, quoted) == by_dept
