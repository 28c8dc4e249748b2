"""values_validate: strict JSON-mode validation of input and edits, one key at a time, naming the field."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal, NotRequired, TypedDict

import pytest
from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from demo.graphs.kyc_onboarding import KycState
from demo.graphs.loan_approval import LoanState
from runtime.state_schema import FieldError, json_schema_for, required_keys, schema_fields, values_validate


class Address(TypedDict):
    city: str
    zip: int


class Person(TypedDict, total=False):
    name: str
    age: int
    address: Address


class CaseState(TypedDict, total=False):
    amount: int
    rate: float
    note: str
    urgent: bool
    tags: list[str]
    tier: Literal["basic", "standard", "premium"]
    person: Person
    messages: Annotated[list[AnyMessage], add_messages]


@dataclasses.dataclass(eq=True)
class SchemaMarker:
    """Unhashable Annotated metadata, like LangChain's ``OmitFromSchema`` in ``create_agent`` states."""

    input: bool = True


class AgentLikeState(TypedDict):
    jump_to: NotRequired[Annotated[str | None, SchemaMarker()]]
    turns: NotRequired[Annotated[int, SchemaMarker()]]


@dataclasses.dataclass
class DataclassState:
    amount: int
    note: str = ""


class PydanticState(BaseModel):
    amount: int
    note: str = ""


def refused(schema: type, values: Any, **kwargs: Any) -> FieldError:
    with pytest.raises(FieldError) as caught:
        values_validate(schema, values, prefix=kwargs.pop("prefix", "edits"), **kwargs)
    return caught.value


# --- scalar types, strictly ----------------------------------------------------------


@pytest.mark.parametrize(
    "key,value",
    [
        ("amount", "5"),  # a numeric string is not an int
        ("amount", True),  # a boolean is not an int
        ("amount", 5.5),  # a fraction is not an int
        ("amount", None),
        ("note", 5),  # a number is not a string
        ("urgent", "true"),  # a string is not a boolean
        ("urgent", 1),  # a number is not a boolean
        ("rate", "0.5"),
        ("tags", "a,b"),
    ],
)
def test_it_refuses_a_value_of_the_wrong_json_type_naming_the_field(key, value):
    error = refused(CaseState, {key: value})
    assert error.field == f"edits.{key}"
    assert str(error).startswith(f"edits.{key}: ")


@pytest.mark.parametrize(
    "values",
    [
        {"amount": 5},
        {"rate": 0.5},
        {"rate": 1},  # an integer is a valid JSON number
        {"note": "ok"},
        {"urgent": False},
        {"tags": ["a", "b"]},
        {"tier": "premium"},
        {"person": {"name": "Ada", "age": 36, "address": {"city": "Paris", "zip": 75001}}},
        {},
    ],
)
def test_it_accepts_values_of_the_right_type_unchanged(values):
    assert values_validate(CaseState, values, prefix="edits") == values


def test_it_names_the_prefix_it_was_given():
    assert refused(LoanState, {"amount": "5"}, prefix="input").field == "input.amount"


def test_it_refuses_a_string_for_the_loan_amount_naming_edits_amount():
    error = refused(LoanState, {"amount": "5"})
    assert error.field == "edits.amount"
    assert "integer" in error.message


@pytest.mark.parametrize(
    "values,message",
    [
        ({"amount": -5}, "Amount must be at least 1"),
        ({"term_months": 0}, "Term months must be at least 1"),
        ({"amount": "5"}, "Amount must be an integer (a whole number)"),
        ({"applicant": 5}, "Applicant must be text"),
        ({"documents": ["a", 2]}, "Documents[1] must be text"),
    ],
)
def test_its_message_names_the_value_in_words(values, message):
    """Pydantic's "Input should be greater than or equal to 1" named nothing: it reached the reviewer as it was."""
    assert refused(LoanState, values).message == message


def test_a_rule_without_words_of_its_own_still_names_the_value():
    class Coded(TypedDict):
        code: Annotated[str, Field(pattern=r"^[A-Z]{3}$")]

    assert refused(Coded, {"code": "abc"}).message == "Code must match ^[A-Z]{3}$"
    assert refused(CaseState, {"tier": "gold"}).message == "Tier must be 'basic', 'standard' or 'premium'"


def test_it_names_the_index_of_a_bad_list_item():
    assert refused(CaseState, {"tags": ["a", 2]}).field == "edits.tags[1]"


# --- unknown keys and allowed keys ----------------------------------------------------


def test_it_refuses_an_unknown_key_listing_the_known_keys():
    error = refused(LoanState, {"amout": 5})
    assert error.field == "edits.amout"
    assert "unknown field" in error.message
    for known in ("amount", "applicant", "income", "loan_id", "term_months"):
        assert known in error.message


def test_it_refuses_a_key_outside_the_allowed_ones_listing_the_editable_ones():
    error = refused(LoanState, {"income": 90000}, allowed=["amount", "term_months"])
    assert error.field == "edits.income"
    assert "amount, term_months" in error.message


def test_it_accepts_a_key_inside_the_allowed_ones():
    assert values_validate(LoanState, {"amount": 5}, prefix="edits", allowed=["amount"]) == {"amount": 5}


def test_an_empty_allowed_list_allows_nothing():
    assert refused(LoanState, {"amount": 5}, allowed=[]).field == "edits.amount"


@pytest.mark.parametrize("values", [[1, 2], "amount=5", 5, None])
def test_it_refuses_values_that_are_not_an_object(values):
    error = refused(LoanState, values)
    assert error.field == "edits"
    assert error.message == "must be an object"


# --- nested and constrained types ----------------------------------------------------------


def test_it_names_the_path_of_a_bad_value_in_a_nested_typed_dict():
    assert refused(CaseState, {"person": {"name": 5}}).field == "edits.person.name"


def test_it_names_the_path_two_levels_down():
    error = refused(CaseState, {"person": {"address": {"city": "Paris", "zip": "75001"}}})
    assert error.field == "edits.person.address.zip"


def test_it_refuses_an_unknown_key_in_a_nested_typed_dict():
    assert refused(CaseState, {"person": {"nickname": "Ada"}}).field == "edits.person.nickname"


def test_it_names_edits_applicant_name_for_the_kyc_demo_state():
    """The shipped KYC demo state: ``applicant`` is a nested TypedDict the compliance gate lets reviewers edit."""
    error = refused(KycState, {"applicant": {"name": 5}}, allowed=["tier", "applicant"])
    assert error.field == "edits.applicant.name"


@pytest.mark.parametrize("schema", [CaseState, KycState])
def test_it_refuses_a_literal_outside_its_values(schema):
    error = refused(schema, {"tier": "gold"})
    assert error.field == "edits.tier"
    assert "'basic', 'standard' or 'premium'" in error.message


# --- reducers with loose input ------------------------------------------------------------


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "hi"}],
        [("user", "hi")],
        "hi",
    ],
)
def test_it_leaves_add_messages_fields_to_their_reducer(messages):
    assert values_validate(CaseState, {"messages": messages}, prefix="input") == {"messages": messages}


# --- other schema kinds ------------------------------------------------------------------------


@pytest.mark.parametrize("schema", [DataclassState, PydanticState])
def test_it_validates_dataclass_and_pydantic_states(schema):
    assert values_validate(schema, {"amount": 5}, prefix="edits") == {"amount": 5}
    assert refused(schema, {"amount": "5"}).field == "edits.amount"
    assert refused(schema, {"other": 1}).field == "edits.other"


@pytest.mark.parametrize("schema", [CaseState, DataclassState, PydanticState])
def test_schema_fields_lists_every_key(schema):
    expected = (
        {"amount", "note"}
        if schema is not CaseState
        else {"amount", "rate", "note", "urgent", "tags", "tier", "person", "messages"}
    )
    assert set(schema_fields(schema)) == expected


# --- JSON Schema ----------------------------------------------------------------------------


def test_json_schema_for_gives_one_property_per_key():
    schema = json_schema_for(LoanState)
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == set(LoanState.__annotations__)
    assert schema["properties"]["amount"] == {"type": "integer", "minimum": 1, "maximum": 10_000_000}
    assert schema["properties"]["applicant"] == {"type": "string"}
    assert schema["properties"]["risk_score"] == {"type": "number"}


def test_json_schema_for_lists_a_literals_values():
    assert json_schema_for(KycState)["properties"]["tier"]["enum"] == ["basic", "standard", "premium"]


def test_json_schema_for_leaves_reducer_fields_free_form():
    assert json_schema_for(CaseState)["properties"]["messages"] == {}


def test_json_schema_for_describes_a_nested_typed_dict():
    applicant = json_schema_for(KycState)["properties"]["applicant"]
    assert applicant.get("type") == "object"
    assert set(applicant.get("properties", {})) == {"name", "country", "date_of_birth", "email"}


# --- annotations with unhashable metadata (LangChain agent states) ----------------------------


def test_json_schema_for_copes_with_unhashable_annotation_metadata():
    schema = json_schema_for(AgentLikeState)
    assert set(schema["properties"]) == {"jump_to", "turns"}


def test_values_validate_copes_with_unhashable_annotation_metadata():
    assert values_validate(AgentLikeState, {"turns": 3}, prefix="input") == {"turns": 3}


def test_json_schema_for_describes_a_langchain_agent_state():
    from langchain.agents import create_agent
    from langchain.agents.middleware import HumanInTheLoopMiddleware
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    agent = create_agent(
        GenericFakeChatModel(messages=iter([])), tools=[], middleware=[HumanInTheLoopMiddleware(interrupt_on={})]
    )
    schema = json_schema_for(agent.builder.state_schema)
    assert "messages" in schema["properties"]


class _Start(TypedDict):
    amount: Annotated[int, Field(ge=1)]
    name: str
    note: NotRequired[str]
    term: NotRequired[Annotated[int, Field(ge=1)]]


def test_a_whole_input_must_hold_its_required_keys_and_names_the_first_missing():
    # Under ``from __future__ import annotations`` Python 3.11's TypedDict counts NotRequired keys as required.
    assert required_keys(_Start) == ["amount", "name"]
    with pytest.raises(FieldError) as raised:
        values_validate(_Start, {"note": "x"}, prefix="input", complete=True)
    assert raised.value.field == "input.amount" and "missing: amount, name" in raised.value.message
    assert values_validate(_Start, {"note": "x"}, prefix="values") == {"note": "x"}  # a partial write: no check


def test_a_not_required_keys_value_is_still_checked():
    with pytest.raises(FieldError) as raised:
        values_validate(_Start, {"amount": 1, "name": "n", "term": 0}, prefix="input", complete=True)
    assert raised.value.field == "input.term"


# --- Pydantic models and dataclasses: a field's Field() bounds -------------------------------


class _Line(BaseModel):
    sku: str = Field(min_length=1)
    quantity: int = Field(ge=1)


class _Budget(BaseModel):
    amount: float = Field(gt=0, le=100_000, description="In euros.")
    note: str = Field(default="", max_length=5)
    line: _Line | None = None
    lines: list[_Line] = Field(default_factory=list)
    messages: Annotated[list[AnyMessage], add_messages] = Field(default_factory=list)


@pydantic_dataclass
class _BudgetDataclass:
    amount: float = Field(gt=0, le=100_000)
    count: Annotated[int, Field(le=3)] = 1


@dataclasses.dataclass
class _AnnotatedDataclass:  # under ``from __future__ import annotations``: each field's ``type`` is a string
    amount: Annotated[int, Field(ge=1)]


@pytest.mark.parametrize(
    "schema,values,field,message",
    [
        (_Budget, {"amount": -5}, "edits.amount", "Amount must be more than 0"),
        (_Budget, {"amount": 0}, "edits.amount", "Amount must be more than 0"),
        (_Budget, {"amount": 500_000}, "edits.amount", "Amount must be at most 100000"),
        (_Budget, {"note": "too long"}, "edits.note", "Note must be at most 5 characters"),
        (_Budget, {"line": {"sku": "a", "quantity": 0}}, "edits.line.quantity", "Line.quantity must be at least 1"),
        (_Budget, {"lines": [{"sku": "a", "quantity": 1}, {"sku": ""}]}, "edits.lines[1].sku", None),
        (_BudgetDataclass, {"amount": -5}, "edits.amount", "Amount must be more than 0"),
        (_BudgetDataclass, {"count": 4}, "edits.count", "Count must be at most 3"),
        (_AnnotatedDataclass, {"amount": 0}, "edits.amount", "Amount must be at least 1"),
    ],
)
def test_a_models_field_bounds_are_checked(schema, values, field, message):
    """A Pydantic field's bare annotation (``float``) was all that was checked: ``amount: -5`` was accepted."""
    error = refused(schema, values)
    assert error.field == field
    if message:
        assert error.message == message


def test_a_models_values_within_bounds_and_its_reducer_fields_are_accepted():
    values = {"amount": 5, "line": {"sku": "a", "quantity": 2}, "messages": [("user", "hi")]}
    assert values_validate(_Budget, values, prefix="edits") == values


def test_a_pydantic_dataclass_field_with_a_field_default_is_required():
    assert required_keys(_BudgetDataclass) == ["amount"]
    with pytest.raises(FieldError) as raised:
        values_validate(_BudgetDataclass, {"count": 1}, prefix="input", complete=True)
    assert raised.value.field == "input.amount"


def test_json_schema_for_gives_a_models_bounds_as_langgraph_does():
    schema = json_schema_for(_Budget)
    amount = {"exclusiveMinimum": 0, "maximum": 100_000, "type": "number", "description": "In euros."}
    assert schema["properties"]["amount"] == amount
    assert schema["properties"]["note"] == {"default": "", "maxLength": 5, "type": "string"}
    assert json_schema_for(_BudgetDataclass)["properties"]["amount"] == {
        "exclusiveMinimum": 0,
        "maximum": 100_000,
        "type": "number",
    }
    assert json_schema_for(_AnnotatedDataclass)["properties"]["amount"] == {"minimum": 1, "type": "integer"}


def test_json_schema_for_puts_a_nested_models_definition_where_its_reference_points():
    schema = json_schema_for(_Budget)
    assert schema["properties"]["lines"]["items"] == {"$ref": "#/$defs/_Line"}
    assert {"$ref": "#/$defs/_Line"} in schema["properties"]["line"]["anyOf"]
    assert schema["$defs"]["_Line"]["properties"]["quantity"]["minimum"] == 1
    assert all("$defs" not in prop for prop in schema["properties"].values())


# --- a model's own validators ------------------------------------------------------------------


_SPAN = "the approved amount exceeds the requested one"


class _Spend(BaseModel):
    subject: str = ""
    requested: float = Field(default=1, gt=0)
    approved: float = 0

    @field_validator("subject")
    @classmethod
    def _allowed(cls, value: str) -> str:
        if value == "forbidden":
            raise ValueError("this subject is not allowed")
        return value

    @model_validator(mode="after")
    def _within(self) -> _Spend:
        if self.approved > self.requested:
            raise ValueError("the approved amount exceeds the requested one")
        return self


@pydantic_dataclass
class _SpendDataclass:
    requested: float
    approved: float = 0

    @field_validator("approved")
    @classmethod
    def _not_negative(cls, value: float) -> float:
        if value < 0:
            raise ValueError("cannot be negative")
        return value

    @model_validator(mode="after")
    def _within(self) -> _SpendDataclass:
        if self.approved > self.requested:
            raise ValueError("the approved amount exceeds the requested one")
        return self


class _Reads(BaseModel):
    a: int = 0
    b: int = 0

    @model_validator(mode="before")
    @classmethod
    def _needs_b(cls, data: Any) -> Any:
        if data["b"] < 0:  # a KeyError on a state without ``b``
            raise ValueError("b cannot be negative")
        return data


class _Frozen(_Spend):
    model_config = ConfigDict(frozen=True)


@pytest.mark.parametrize(
    "schema,values,current,field,message",
    [
        (_Spend, {"subject": "forbidden"}, None, "edits.subject", "Subject: this subject is not allowed"),
        (_Spend, {"approved": 50}, {"requested": 10}, "edits.approved", "Approved: " + _SPAN),
        (_Spend, {"approved": 50, "requested": 10}, None, "edits", "State: " + _SPAN),
        (_Spend, {"approved": 5}, {}, "edits.approved", "Approved: " + _SPAN),  # the default a node would see
        (_SpendDataclass, {"approved": -1}, None, "edits.approved", "Approved: cannot be negative"),
        (_SpendDataclass, {"approved": 50}, {"requested": 10}, "edits.approved", "Approved: " + _SPAN),
        (_Reads, {"b": -1}, None, "edits.b", "B: b cannot be negative"),
        (_Frozen, {"subject": "forbidden"}, None, "edits.subject", "Subject: this subject is not allowed"),
    ],
)
def test_a_models_validators_refuse_a_write_naming_the_field(schema, values, current, field, message):
    """A ``@field_validator`` / ``@model_validator`` was not run: a write they refuse was signed."""
    with pytest.raises(FieldError) as raised:
        values_validate(schema, values, prefix="edits", current=current)
    assert (raised.value.field, raised.value.message) == (field, message)


@pytest.mark.parametrize(
    "schema,values,current",
    [
        (_Spend, {"subject": "desks"}, {"approved": 50}),  # the stored state is refused, not the write
        (_Spend, {"approved": 50}, None),  # ``requested`` is not known: not judged
        (_Spend, {"approved": 5}, {"requested": 10}),
        (_SpendDataclass, {"approved": 5}, {}),  # the required ``requested`` is not stored: not judged
        (_Reads, {"a": 1}, None),  # the validator cannot read ``b``: not judged
        (_Frozen, {"approved": 5}, {"requested": 10}),
    ],
)
def test_a_partial_state_is_not_refused_for_what_the_write_does_not_touch(schema, values, current):
    assert values_validate(schema, values, prefix="edits", current=current) == values


def test_a_whole_input_is_validated_as_the_model_validates_it():
    with pytest.raises(FieldError) as raised:
        values_validate(_Spend, {"approved": 5}, prefix="input", complete=True)
    assert (raised.value.field, raised.value.message) == ("input", "State: " + _SPAN)
    assert values_validate(_Spend, {"approved": 1}, prefix="input", complete=True) == {"approved": 1}
