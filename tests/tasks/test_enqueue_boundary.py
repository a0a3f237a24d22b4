"""The enqueue boundary in the tasks layer: registry.new_task, strict JSON, value-free errors."""

from __future__ import annotations

import json
import math
import traceback
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import BaseModel

from aster_forge import AsterForgeError, TaskExecutionContext, TaskStatus
from aster_forge.tasks import (
    ClaimedTaskOutcome,
    NewTask,
    TaskPayloadError,
    TaskRegistry,
    TaskSpec,
    _records,
)
from aster_forge.tasks.errors import (
    TaskCodecError,
    TaskEnqueueValueError,
    TaskKindNotRegisteredError,
    TaskLaneMismatchError,
    TaskRegistryError,
)
from aster_forge.testing import InMemoryTaskStore, ManualClock

from ._dispatch_support import (
    REGISTRY,
    Harness,
    Job,
    Kind,
    Lane,
    claim_one,
    make_config,
    run_claimed,
)

SECRET = "s3cret-value-4711"


class Reading(BaseModel):
    label: str
    value: float
    tags: list[float] = []


async def _noop(ctx: TaskExecutionContext, state: object, payload: Reading) -> None:
    return None


READING = TaskSpec(kind="reading", payload_type=Reading, result_type=None, run=_noop)


def _whole_chain(exc: BaseException) -> str:
    """Every message of the exception and of everything it chains to, as logged."""
    return "".join(traceback.format_exception(exc))


# -- registry.new_task ------------------------------------------------------------------


def test_new_task_encodes_takes_the_kind_lane_and_fills_steps() -> None:
    task = REGISTRY.new_task(Kind.REPORT, Job(name="r", value=3), priority=7, max_attempts=2)
    assert (task.kind, task.lane, task.priority, task.max_attempts) == ("report", "fallback", 7, 2)
    assert json.loads(task.payload_json) == {"name": "r", "value": 3}
    assert task.steps_json is not None
    assert [step["key"] for step in json.loads(task.steps_json)] == ["collect", "render"]
    plain = REGISTRY.new_task("mail", {"name": "m"}, dedupe_key="once", delay=timedelta(seconds=5))
    assert (plain.lane, plain.steps_json, plain.dedupe_key_text) == ("fallback", None, "once")
    assert plain.delay == timedelta(seconds=5)
    assert plain.max_attempts == NewTask("k", "l").max_attempts


def test_new_task_refuses_unknown_kind_and_invalid_payload_without_values() -> None:
    with pytest.raises(TaskKindNotRegisteredError) as unknown:
        REGISTRY.new_task("nope", Job(name="x"))
    assert unknown.value.task_kind == "nope"
    with pytest.raises(TaskPayloadError) as bad:
        REGISTRY.new_task(Kind.MAIL, {"name": SECRET, "value": SECRET})
    assert bad.value.task_kind == "mail" and bad.value.fields == ("value",)
    assert SECRET not in _whole_chain(bad.value)


def test_new_task_needs_a_validated_registry() -> None:
    registry: TaskRegistry[Harness, Kind, Lane] = TaskRegistry(kind=Kind, lane=Lane)
    with pytest.raises(TaskRegistryError):
        registry.new_task(Kind.MAIL, Job(name="x"))


def test_check_new_task_refuses_unknown_kind_and_foreign_lane() -> None:
    with pytest.raises(TaskKindNotRegisteredError):
        REGISTRY.check_new_task(NewTask("ghost", "fallback"))
    with pytest.raises(TaskLaneMismatchError) as wrong:
        REGISTRY.check_new_task(NewTask("render", "fallback", payload_json='{"name": "x"}'))
    assert (wrong.value.lane, wrong.value.expected_lane) == ("fallback", "media")
    filled = REGISTRY.check_new_task(NewTask("report", "fallback", payload_json='{"name": "x"}'))
    assert filled.steps_json is not None and "collect" in filled.steps_json
    own = NewTask("report", "fallback", payload_json='{"name": "x"}', steps_json="[]")
    assert REGISTRY.check_new_task(own) is own


# -- strict JSON: NaN, infinities, lone surrogates --------------------------------------


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (Reading(label="a", value=math.nan), "value"),
        (Reading(label="a", value=math.inf), "value"),
        (Reading(label="a", value=-math.inf), "value"),
        (Reading(label="a", value=1.0, tags=[1.0, math.nan]), "tags.1"),
        (Reading(label="a\ud800" + SECRET, value=1.0), "label"),
    ],
)
def test_encode_payload_refuses_what_is_not_standard_storable_json(
    payload: Reading, field: str
) -> None:
    with pytest.raises(TaskPayloadError) as caught:
        READING.encode_payload(payload)
    assert isinstance(caught.value, TaskCodecError)
    assert caught.value.task_kind == "reading" and caught.value.fields == (field,)
    assert SECRET not in _whole_chain(caught.value)
    assert "nan" not in str(caught.value).lower().replace("a nan", "")


def test_encode_payload_still_encodes_finite_values() -> None:
    assert json.loads(READING.encode_payload(Reading(label="null", value=1.5))) == {
        "label": "null",
        "value": 1.5,
        "tags": [],
    }


@pytest.mark.parametrize(
    "text",
    ['{"x": NaN}', '{"x": Infinity}', "[-Infinity]", "NaN"],
)
def test_new_task_refuses_non_standard_json(text: str) -> None:
    with pytest.raises(TaskEnqueueValueError, match="payload_json is not standard JSON"):
        NewTask("k", "l", payload_json=text)
    with pytest.raises(TaskEnqueueValueError, match="steps_json is not standard JSON"):
        NewTask("k", "l", steps_json=text)


def _refuse(name: str) -> object:
    raise ValueError(name)


def _decode_verdict(text: str) -> str | None:
    """What a plain ``JSONDecoder.decode`` says of ``text``: ``None``, or the message."""
    try:
        json.JSONDecoder(parse_constant=_refuse).decode(text)
    except RecursionError:
        return "payload_json is nested too deeply to decode"
    except json.JSONDecodeError as exc:
        return f"payload_json is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    except ValueError as exc:
        return f"payload_json is not standard JSON: {exc.args[0]} is not a JSON value"
    return None


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
# Around and after a document: whitespace (legal), more values and stray characters.
_EDGES = st.text(alphabet=' \t\n\r1x]}",:NaI', max_size=3)


@given(
    before=_EDGES,
    document=_JSON_VALUES.map(json.dumps),
    cut=st.integers(min_value=0, max_value=4),
    after=_EDGES,
)
@example(before="", document="1", cut=0, after=" 2")
@example(before=" ", document="[1]", cut=0, after="")
@example(before="", document='{"a": 1}', cut=2, after="")
def test_new_task_judges_json_as_the_decoder_does(
    before: str, document: str, cut: int, after: str
) -> None:
    # Whatever the text, accepted exactly when decode() accepts it, with its message.
    text = before + document[: len(document) - cut] + after
    expected = _decode_verdict(text)
    if expected is None:
        assert NewTask("k", "l", payload_json=text).payload_json == text
    else:
        with pytest.raises(TaskEnqueueValueError) as caught:
            NewTask("k", "l", payload_json=text)
        assert str(caught.value) == expected


def test_json_errors_do_not_chain_the_document() -> None:
    with pytest.raises(TaskEnqueueValueError) as caught:
        NewTask("k", "l", payload_json='{"secret": "' + SECRET + '", oops}')
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert SECRET not in _whole_chain(caught.value)


def test_decode_errors_do_not_chain_the_input() -> None:
    with pytest.raises(TaskPayloadError) as caught:
        READING.decode_payload(json.dumps({"label": SECRET, "value": SECRET}))
    assert caught.value.fields == ("value",)
    assert SECRET not in _whole_chain(caught.value)


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"kind": "a\x00b"}, "NUL"),
        ({"lane": "l\x00"}, "NUL"),
        ({"kind": "k\ud800"}, "surrogate"),
        ({"lane": "\udfffl"}, "surrogate"),
        ({"kind": "k\x07"}, "control"),
        ({"payload_json": '"\ud800"'}, "surrogate"),
        ({"payload_json": '"a\x00"'}, "NUL"),
        ({"steps_json": '["\udc00"]'}, "surrogate"),
    ],
)
def test_new_task_refuses_text_no_backend_stores_alike(
    kwargs: dict[str, str], problem: str
) -> None:
    fields = {"kind": "k", "lane": "l", **kwargs}
    with pytest.raises(TaskEnqueueValueError, match=problem):
        NewTask(**fields)  # type: ignore[arg-type]


# -- execution tolerates rows enqueued without steps ------------------------------------


async def test_a_task_enqueued_without_steps_runs_with_its_specs_steps() -> None:
    clock = ManualClock()
    store = InMemoryTaskStore(clock)  # no registry: the row keeps steps_json NULL
    harness = Harness()

    async def report(ctx: TaskExecutionContext, job: Job) -> int:
        await ctx.step_succeeded("collect")
        await ctx.step_succeeded("render")
        return 1

    harness.actions["r"] = report
    bare = NewTask("report", "fallback", payload_json='{"name": "r"}')
    assert bare.steps_json is None
    task_id = (await store.enqueue(bare)).record.id
    record = await claim_one(store, Lane.FALLBACK)
    outcome = await run_claimed(store, record, make_config(harness, clock))
    assert outcome.outcome is ClaimedTaskOutcome.SUCCEEDED
    row = await store.get_task(task_id)
    assert row is not None and row.status is TaskStatus.SUCCEEDED
    assert row.steps_json is not None
    assert [s["status"] for s in json.loads(row.steps_json)] == ["succeeded", "succeeded"]


async def test_in_memory_store_has_no_transaction_to_join() -> None:
    store = InMemoryTaskStore(ManualClock())
    with pytest.raises(TaskEnqueueValueError, match="no database transaction"):
        await store.enqueue(NewTask("k", "l"), connection=object())  # type: ignore[arg-type]
    assert store.all_tasks() == []


def test_text_checked_once_is_still_refused_when_it_changes() -> None:
    # Valid kinds, lanes and steps are remembered so repeat tasks skip their checks:
    # any other text is still checked in full, and the memory stays bounded.
    for _ in range(3):
        NewTask("mail", "fallback", steps_json='[{"key": "a"}]')
    with pytest.raises(TaskEnqueueValueError):
        NewTask("mail\x01", "fallback")
    with pytest.raises(TaskEnqueueValueError):
        NewTask("mail", "fallback ")
    with pytest.raises(TaskEnqueueValueError):
        NewTask("mail", "fallback", steps_json='[{"key": "a"}')
    with pytest.raises(TaskEnqueueValueError):
        NewTask("mail", "fallback", steps_json="[NaN]")
    for n in range(_records._KNOWN_GOOD_LIMIT + 10):
        NewTask(f"kind-{n}", "fallback")
    assert len(_records._KNOWN_GOOD) <= _records._KNOWN_GOOD_LIMIT


def test_registry_tasks_equal_the_same_request_built_by_hand() -> None:
    # registry.new_task skips re-checking what it produced itself; the result is the same.
    due = datetime(2027, 1, 1, tzinfo=UTC)
    options = [
        {},
        {"run_at": due, "priority": -4, "max_attempts": 2, "dedupe_key": "k-1"},
        {"delay": timedelta(minutes=3), "extra": {"tenant": "t"}},
    ]
    for option in options:
        made = REGISTRY.new_task(Kind.REPORT, Job(name="n"), **option)  # type: ignore[arg-type]
        by_hand = NewTask(
            "report",
            "fallback",
            payload_json=made.payload_json,
            steps_json=made.steps_json,
            **{"max_attempts": 5, **option},  # type: ignore[arg-type]
        )
        assert made == by_hand
        assert type(made.dedupe_key) is type(by_hand.dedupe_key)
    assert REGISTRY.new_task(Kind.MAIL, Job(name="m")).steps_json is None


@pytest.mark.parametrize(
    ("option", "problem"),
    [
        ({"run_at": datetime(2027, 1, 1)}, "timezone-aware"),
        ({"delay": timedelta(seconds=-1)}, "non-negative"),
        ({"priority": 2**31}, "32-bit"),
        ({"priority": True}, "priority must be an int"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"dedupe_key": " "}, "dedupe key must not be empty"),
    ],
)
def test_registry_tasks_check_the_options_as_new_task_does(
    option: dict[str, object], problem: str
) -> None:
    with pytest.raises(AsterForgeError, match=problem) as by_registry:
        REGISTRY.new_task(Kind.MAIL, Job(name="m"), **option)  # type: ignore[arg-type]
    with pytest.raises(AsterForgeError) as by_hand:
        NewTask("mail", "fallback", **option)  # type: ignore[arg-type]
    assert type(by_registry.value) is type(by_hand.value)
    assert str(by_registry.value) == str(by_hand.value)
