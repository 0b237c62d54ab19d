"""Malformed or unenforceable output constraints, as a chat completion request carries them.

`bad_constraints()` returns exactly 500 (label, fields) pairs; merge `fields` into an otherwise
valid request body (`{**body, **fields}`): each must be refused with HTTP 400 and leave the
server healthy. Labels are `category/what/where`, unique. Standard library only, and the same
list on every call (the only randomness is a seeded `random.Random(0)`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from itertools import combinations
from typing import Any

Fields = dict[str, Any]
Case = tuple[str, Fields]
Channel = Callable[[Any], Fields]

TOTAL = 500

# One valid constraint of each kind: alone each is accepted, so the pair and beam-search cases
# are refused for the combination, not for their parts.
GOOD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "maxLength": 16}},
    "required": ["answer"],
}
GOOD_REGEX = "[a-z]{1,8}"
GOOD_CHOICE = ["yes", "no"]
GOOD_GRAMMAR = 'start: "yes" | "no"'


def _json_schema_format(schema: Any) -> Fields:
    return {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "t", "schema": schema, "strict": True},
        }
    }


# Every place a schema can travel, as an object or as its JSON text.
SCHEMA_CHANNELS: dict[str, Channel] = {
    "response_format": _json_schema_format,
    "structured_outputs.json": lambda s: {"structured_outputs": {"json": s}},
    "guided_json": lambda s: {"guided_json": s},
    "structured_outputs.json_text": lambda s: {"structured_outputs": {"json": json.dumps(s)}},
    "guided_json_text": lambda s: {"guided_json": json.dumps(s)},
}
REGEX_CHANNELS: dict[str, Channel] = {
    "structured_outputs.regex": lambda r: {"structured_outputs": {"regex": r}},
    "guided_regex": lambda r: {"guided_regex": r},
}
GRAMMAR_CHANNELS: dict[str, Channel] = {
    "structured_outputs.grammar": lambda g: {"structured_outputs": {"grammar": g}},
    "guided_grammar": lambda g: {"guided_grammar": g},
}
CHOICE_CHANNELS: dict[str, Channel] = {
    "structured_outputs.choice": lambda c: {"structured_outputs": {"choice": c}},
    "guided_choice": lambda c: {"guided_choice": c},
}

# One valid constraint per kind, named by where it travels.
GOOD_KINDS: dict[str, Fields] = {
    "response_format.json_object": {"response_format": {"type": "json_object"}},
    "response_format.json_schema": _json_schema_format(GOOD_SCHEMA),
    "structured_outputs.json": {"structured_outputs": {"json": GOOD_SCHEMA}},
    "structured_outputs.json_text": {"structured_outputs": {"json": json.dumps(GOOD_SCHEMA)}},
    "structured_outputs.regex": {"structured_outputs": {"regex": GOOD_REGEX}},
    "structured_outputs.choice": {"structured_outputs": {"choice": GOOD_CHOICE}},
    "structured_outputs.grammar": {"structured_outputs": {"grammar": GOOD_GRAMMAR}},
    "structured_outputs.json_object": {"structured_outputs": {"json_object": True}},
    "guided_json": {"guided_json": GOOD_SCHEMA},
    "guided_regex": {"guided_regex": GOOD_REGEX},
    "guided_choice": {"guided_choice": GOOD_CHOICE},
    "guided_grammar": {"guided_grammar": GOOD_GRAMMAR},
}


def _spread(
    category: str, bases: list[tuple[str, Any]], channels: dict[str, Channel], count: int
) -> list[Case]:
    """`count` cases: the bases in turn, each repeat of a base through the next channel (so
    every (base, channel) label is unique)."""
    names = list(channels)
    if count > len(bases) * len(names):
        raise ValueError(f"{category}: {count} cases from {len(bases)}x{len(names)}")
    cases = []
    for i in range(count):
        k, j = divmod(i, len(bases))
        what, value = bases[j]
        where = names[(j + k) % len(names)]
        cases.append((f"{category}/{what}/{where}", channels[where](value)))
    return cases


# --- wrong JSON types (100) ----------------------------------------------------------------

# Values of the wrong type, by name; each field below takes the ones that are wrong for it.
# No null: a null field means "not given" and is not an error.
_WRONG: dict[str, Any] = {
    "int": 5,
    "zero": 0,
    "float": 1.5,
    "string": "x",
    "true": True,
    "false": False,
    "empty_list": [],
    "list": ["x"],
    "empty_object": {},
    "object": {"x": 1},
}


def _rf_schema_with(key: str, value: Any) -> Fields:
    json_schema: dict[str, Any] = {"name": "t", "schema": GOOD_SCHEMA, "strict": True}
    json_schema[key] = value
    return {"response_format": {"type": "json_schema", "json_schema": json_schema}}


# field -> (how a value is placed, names from _WRONG, extra named values)
_WRONG_FIELDS: dict[str, tuple[Channel, list[str], dict[str, Any]]] = {
    "response_format": (
        lambda v: {"response_format": v},
        ["int", "float", "string", "true", "false", "empty_list", "list"],
        {"string_json_object": "json_object", "list_of_formats": [{"type": "json_object"}]},
    ),
    "response_format.type": (
        lambda v: {"response_format": {"type": v}},
        ["int", "float", "true", "false", "empty_list", "list", "empty_object", "object"],
        {"list_json_object": ["json_object"]},
    ),
    "response_format.json_schema": (
        lambda v: {"response_format": {"type": "json_schema", "json_schema": v}},
        ["int", "float", "string", "true", "false", "empty_list", "list"],
        {"list_of_json_schema": [{"name": "t", "schema": GOOD_SCHEMA}]},
    ),
    "response_format.json_schema.name": (
        lambda v: _rf_schema_with("name", v),
        ["int", "float", "true", "false", "empty_list", "list", "empty_object", "object"],
        {},
    ),
    "response_format.json_schema.schema": (
        lambda v: _rf_schema_with("schema", v),
        ["int", "zero", "float", "string", "empty_list", "list"],
        {"string_not_json": "{type: object}", "list_of_schema": [GOOD_SCHEMA]},
    ),
    "response_format.json_schema.strict": (
        lambda v: _rf_schema_with("strict", v),
        ["int", "float", "string", "empty_list", "list", "empty_object"],
        {},
    ),
    "structured_outputs": (
        lambda v: {"structured_outputs": v},
        ["int", "float", "string", "true", "false", "empty_list", "list"],
        {"list_of_constraints": [{"regex": GOOD_REGEX}]},
    ),
    "structured_outputs.json": (
        lambda v: {"structured_outputs": {"json": v}},
        ["int", "zero", "float", "empty_list", "list"],
        {"list_of_schema": [GOOD_SCHEMA]},
    ),
    "structured_outputs.regex": (
        lambda v: {"structured_outputs": {"regex": v}},
        ["int", "float", "true", "empty_list", "list", "empty_object", "object"],
        {},
    ),
    "structured_outputs.grammar": (
        lambda v: {"structured_outputs": {"grammar": v}},
        ["int", "float", "true", "empty_list", "list", "empty_object"],
        {},
    ),
    "structured_outputs.json_object": (
        lambda v: {"structured_outputs": {"json_object": v}},
        ["int", "float", "string", "empty_list", "list", "empty_object"],
        {"string_true": "true"},
    ),
    "guided_json": (
        lambda v: {"guided_json": v},
        ["int", "zero", "float", "empty_list", "list"],
        {},
    ),
    "guided_regex": (
        lambda v: {"guided_regex": v},
        ["int", "float", "true", "empty_list", "list", "empty_object"],
        {},
    ),
    "guided_grammar": (
        lambda v: {"guided_grammar": v},
        ["int", "float", "true", "empty_list", "list", "empty_object", "object"],
        {},
    ),
}


def _wrong_types() -> list[Case]:
    cases = []
    for field, (place, names, extra) in _WRONG_FIELDS.items():
        values = {name: _WRONG[name] for name in names} | extra
        for what, value in values.items():
            cases.append((f"wrong_type/{field}/{what}", place(value)))
    return cases


# --- response_format without a usable type, json_schema without a schema (32) ---------------


def _missing_type_or_schema() -> list[Case]:
    cases: list[Case] = [
        ("format/response_format_empty_object", {"response_format": {}}),
        (
            "format/response_format_no_type_with_json_schema",
            {"response_format": {"json_schema": {"name": "t", "schema": GOOD_SCHEMA}}},
        ),
        ("format/response_format_type_null", {"response_format": {"type": None}}),
    ]
    # Unknown response_format types: misspellings, other casings, other constraint kinds.
    for name in [
        "",
        "json",
        "JSON_OBJECT",
        "Json_Schema",
        "json-schema",
        "jsonschema",
        " json_object",
        "json_object ",
        "xml",
        "yaml",
        "regex",
        "grammar",
        "choice",
    ]:
        label = f"format/response_format_type_unknown_{name.strip() or 'empty'}"
        if name != name.strip():
            label += "_padded_" + ("left" if name.startswith(" ") else "right")
        cases.append((label, {"response_format": {"type": name}}))
    # type json_schema whose json_schema has no schema (absent, null, or under another key).
    no_schema: dict[str, Any] = {
        "absent": None,
        "empty": {},
        "name_only": {"name": "t"},
        "name_and_strict": {"name": "t", "strict": True},
        "schema_null": {"name": "t", "schema": None},
        "name_and_description": {"name": "t", "description": "an answer"},
        "schema_under_parameters": {"name": "t", "parameters": GOOD_SCHEMA},
        "schema_under_schema_": {"name": "t", "schema_": GOOD_SCHEMA},
    }
    for what, json_schema in no_schema.items():
        rf: dict[str, Any] = {"type": "json_schema"}
        if json_schema is not None:
            rf["json_schema"] = json_schema
        cases.append((f"format/json_schema_without_schema_{what}", {"response_format": rf}))
    # structured_outputs naming no constraint: exactly one is required.
    none_set: dict[str, Any] = {
        "empty_object": {},
        "all_null": {"json": None, "regex": None, "choice": None, "grammar": None},
        "json_object_false": {"json_object": False},
        "unknown_key_json_schema": {"json_schema": GOOD_SCHEMA},
        "unknown_key_type": {"type": "json_object"},
        "unknown_key_choices": {"choices": GOOD_CHOICE},
        "unknown_key_pattern": {"pattern": GOOD_REGEX},
        "unknown_key_lark": {"lark": GOOD_GRAMMAR},
    }
    for what, value in none_set.items():
        cases.append((f"format/structured_outputs_{what}", {"structured_outputs": value}))
    return cases


# --- schemas that are not valid JSON Schema (100) -----------------------------------------

_INVALID_SCHEMAS: list[tuple[str, Any]] = [
    ("type_nonsense", {"type": "nonsense"}),
    ("type_int", {"type": 5}),
    ("type_list_with_nonsense", {"type": ["string", "nonsense"]}),
    ("type_empty_list", {"type": []}),
    ("type_object_value", {"type": {"type": "string"}}),
    ("properties_int", {"type": "object", "properties": 3}),
    ("properties_list", {"type": "object", "properties": ["a"]}),
    ("property_schema_int", {"type": "object", "properties": {"a": 5}}),
    ("property_schema_string", {"type": "object", "properties": {"a": "string"}}),
    ("property_type_nonsense", {"type": "object", "properties": {"a": {"type": "nonsense"}}}),
    ("required_string", {"type": "object", "required": "x"}),
    ("required_ints", {"type": "object", "required": [1, 2]}),
    ("nested_required_string", {"type": "array", "items": {"type": "object", "required": "a"}}),
    ("minimum_string", {"type": "integer", "minimum": "a"}),
    ("maximum_numeric_string", {"type": "number", "maximum": "10"}),
    ("exclusive_minimum_string", {"type": "integer", "exclusiveMinimum": "3"}),
    ("min_length_negative", {"type": "string", "minLength": -1}),
    ("min_length_float", {"type": "string", "minLength": 1.5}),
    ("max_length_string", {"type": "string", "maxLength": "5"}),
    ("items_int", {"type": "array", "items": 5}),
    ("items_string", {"type": "array", "items": "string"}),
    ("items_list_of_int", {"type": "array", "items": [5]}),
    ("min_items_negative", {"type": "array", "minItems": -2}),
    ("max_items_string", {"type": "array", "maxItems": "3"}),
    ("unique_items_string", {"type": "array", "uniqueItems": "yes"}),
    ("prefix_items_object", {"type": "array", "prefixItems": {"type": "string"}}),
    ("min_properties_negative", {"type": "object", "minProperties": -1}),
    ("property_names_int", {"type": "object", "propertyNames": 5}),
    ("additional_properties_string", {"type": "object", "additionalProperties": "no"}),
    ("additional_properties_int", {"type": "object", "additionalProperties": 5}),
    ("dependent_required_string", {"type": "object", "dependentRequired": {"a": "b"}}),
    ("ref_missing_defs", {"$ref": "#/$defs/missing"}),
    ("ref_missing_definitions", {"$ref": "#/definitions/missing"}),
    (
        "ref_missing_nested",
        {
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/nope"}},
            "$defs": {"yes": {"type": "string"}},
        },
    ),
    ("ref_bad_pointer", {"$ref": "#/properties/a/nonexistent"}),
    ("ref_not_a_pointer", {"$ref": "#no-such-anchor"}),
    ("ref_int", {"$ref": 5}),
    ("ref_remote", {"$ref": "https://example.invalid/schema.json"}),
    ("ref_to_invalid", {"$ref": "#/$defs/a", "$defs": {"a": 5}}),
    ("ref_escaped_missing", {"$ref": "#/$defs/a~1b"}),
    (
        "ref_target_type_nonsense",
        {
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/a"}},
            "$defs": {"a": {"type": "nonsense"}},
        },
    ),
    ("pattern_unbalanced_paren", {"type": "string", "pattern": "("}),
    ("pattern_unclosed_class", {"type": "string", "pattern": "[a-"}),
    ("pattern_int", {"type": "string", "pattern": 5}),
    ("pattern_properties_bad_regex", {"type": "object", "patternProperties": {"(": {}}}),
    ("enum_string", {"enum": "abc"}),
    ("enum_int", {"enum": 5}),
    ("any_of_empty", {"anyOf": []}),
    ("any_of_object", {"anyOf": {"type": "string"}}),
    ("one_of_string", {"oneOf": "x"}),
    ("all_of_int", {"allOf": 5}),
    ("not_int", {"not": 5}),
    ("if_int", {"if": 5, "then": {"type": "string"}}),
    ("format_int", {"type": "string", "format": 5}),
    ("multiple_of_zero", {"type": "number", "multipleOf": 0}),
    ("multiple_of_string", {"type": "number", "multipleOf": "2"}),
    ("max_properties_string", {"type": "object", "maxProperties": "1"}),
    ("max_length_negative", {"type": "string", "maxLength": -3}),
    ("max_items_float", {"type": "array", "maxItems": 1.5}),
    ("minimum_list", {"type": "integer", "minimum": [1]}),
    ("required_nested_list", {"type": "object", "required": [["a"]]}),
    ("any_of_with_int", {"anyOf": [{"type": "string"}, 5]}),
    ("one_of_empty", {"oneOf": []}),
    (
        "additional_properties_type_nonsense",
        {"type": "object", "additionalProperties": {"type": "nonsense"}},
    ),
    ("pattern_bad_repeat", {"type": "string", "pattern": "a{3,1}"}),
    ("pattern_lookahead", {"type": "string", "pattern": "^(?=a)"}),
    ("pattern_backreference", {"type": "string", "pattern": "(a)\\1"}),
]

# JSON text that is not a schema at all (the text channels only).
_NOT_SCHEMA_TEXT: list[tuple[str, str]] = [
    ("text_not_json", "not json"),
    ("text_truncated", '{"type": "object"'),
    ("text_trailing_comma", '{"type": "object",}'),
    ("text_single_quotes", "{'type': 'object'}"),
    ("text_empty", ""),
    ("text_null", "null"),
    ("text_number", "5"),
    ("text_list", "[]"),
]


def _invalid_schemas(count: int) -> list[Case]:
    text_channels: dict[str, Channel] = {
        "structured_outputs.json_text": lambda t: {"structured_outputs": {"json": t}},
        "guided_json_text": lambda t: {"guided_json": t},
    }
    texts = _spread("invalid_schema", list(_NOT_SCHEMA_TEXT), text_channels, len(_NOT_SCHEMA_TEXT))
    schemas = _spread("invalid_schema", _INVALID_SCHEMAS, SCHEMA_CHANNELS, count - len(texts))
    return schemas + texts


# --- schemas no value can satisfy (60) -----------------------------------------------------

_UNSATISFIABLE: list[tuple[str, Any]] = [
    ("false", False),
    ("not_empty", {"not": {}}),
    ("not_true", {"not": True}),
    ("enum_empty", {"enum": []}),
    ("integer_min_over_max", {"type": "integer", "minimum": 5, "maximum": 1}),
    ("number_min_over_max", {"type": "number", "minimum": 5.5, "maximum": 1.5}),
    (
        "integer_exclusive_no_room",
        {"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 4},
    ),
    ("number_exclusive_equal", {"type": "number", "exclusiveMinimum": 1, "exclusiveMaximum": 1}),
    ("integer_between_fractions", {"type": "integer", "minimum": 1.2, "maximum": 1.8}),
    ("string_min_over_max_length", {"type": "string", "minLength": 5, "maxLength": 2}),
    ("array_min_over_max_items", {"type": "array", "minItems": 3, "maxItems": 1}),
    ("object_min_over_max_properties", {"type": "object", "minProperties": 2, "maxProperties": 1}),
    ("all_of_string_integer", {"allOf": [{"type": "string"}, {"type": "integer"}]}),
    ("all_of_object_array", {"allOf": [{"type": "object"}, {"type": "array"}]}),
    ("all_of_contains_false", {"allOf": [{"type": "string"}, False]}),
    ("any_of_all_false", {"anyOf": [False, False]}),
    ("one_of_only_false", {"oneOf": [False]}),
    ("type_integer_enum_strings", {"type": "integer", "enum": ["a", "b"]}),
    ("type_string_const_int", {"type": "string", "const": 5}),
    ("const_not_in_enum", {"const": "a", "enum": ["b"]}),
    ("required_property_false", {"type": "object", "properties": {"a": False}, "required": ["a"]}),
    (
        "required_but_no_properties",
        {"type": "object", "required": ["a"], "additionalProperties": False},
    ),
    (
        "required_undeclared_closed",
        {
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "required": ["b"],
            "additionalProperties": False,
        },
    ),
    (
        "required_nested_empty_range",
        {
            "type": "object",
            "properties": {"a": {"type": "integer", "minimum": 3, "maximum": 2}},
            "required": ["a"],
        },
    ),
    ("array_items_false_min_one", {"type": "array", "items": False, "minItems": 1}),
    ("array_items_enum_empty_min_one", {"type": "array", "items": {"enum": []}, "minItems": 1}),
    (
        "array_prefix_then_false",
        {"type": "array", "prefixItems": [{"type": "string"}], "items": False, "minItems": 2},
    ),
    ("string_min_length_over_pattern", {"type": "string", "minLength": 3, "pattern": "^a?$"}),
    ("string_enum_too_long", {"type": "string", "enum": ["abcdef"], "maxLength": 3}),
    (
        "number_min_over_max_with_multiple",
        {"type": "number", "minimum": 10, "maximum": 1, "multipleOf": 2},
    ),
    ("number_min_equals_exclusive_max", {"type": "number", "minimum": 2, "exclusiveMaximum": 2}),
    (
        "integer_no_multiple_in_range",
        {"type": "integer", "minimum": 1, "maximum": 9, "multipleOf": 10},
    ),
    ("string_pattern_matches_nothing", {"type": "string", "pattern": "^[^\\s\\S]$"}),
    ("string_email_too_short", {"type": "string", "format": "email", "maxLength": 2}),
    ("string_const_under_min_length", {"type": "string", "const": "abc", "minLength": 5}),
    ("type_string_enum_ints", {"type": "string", "enum": [1, 2]}),
    ("type_boolean_enum_string", {"type": "boolean", "enum": ["true"]}),
    ("type_null_const_zero", {"type": "null", "const": 0}),
    (
        "any_of_each_unsatisfiable",
        {"anyOf": [{"type": "integer", "minimum": 2, "maximum": 1}, {"enum": []}]},
    ),
    (
        "required_nested_all_of_conflict",
        {
            "type": "object",
            "properties": {"a": {"allOf": [{"type": "string"}, {"type": "boolean"}]}},
            "required": ["a"],
        },
    ),
]


def _unsatisfiable(count: int) -> list[Case]:
    return _spread("unsatisfiable_schema", _UNSATISFIABLE, SCHEMA_CHANNELS, count)


# --- invalid regexes (72) ----------------------------------------------------------------

_BAD_REGEXES: list[tuple[str, str]] = [
    ("empty", ""),
    ("open_paren", "("),
    ("close_paren", ")"),
    ("unclosed_group", "(ab"),
    ("extra_close", "ab)"),
    ("unbalanced_nested", "((a)"),
    ("deep_unclosed", "((((((((((a"),
    ("extra_close_after_group", "(a))"),
    ("open_bracket", "["),
    ("unclosed_range", "[a-"),
    ("unclosed_class", "[abc"),
    ("empty_class", "[]"),
    ("unclosed_negated_class", "[^]"),
    ("reversed_range", "[z-a]"),
    ("range_to_class", "[a-\\d]"),
    ("repeat_min_over_max", "a{3,1}"),
    ("repeat_min_over_max_big", "x{9,2}"),
    ("repeat_unclosed", "a{1"),
    ("repeat_negative", "a{-1}"),
    ("star_first", "*a"),
    ("plus_first", "+a"),
    ("question_first", "?a"),
    ("star_after_bar", "a|*"),
    ("star_in_group", "(*)"),
    ("unknown_escape", "\\q"),
    ("escape_upper_z", "a\\Z"),
    ("bad_hex_escape", "\\x{zz}"),
    ("incomplete_hex_escape", "\\x"),
    ("codepoint_out_of_range", "\\x{110000}"),
    ("unknown_unicode_class", "\\p{Nonsense}"),
    ("named_group_unclosed", "(?<"),
    ("named_group_no_close", "(?P<name"),
    ("named_group_empty_name", "(?P<>a)"),
    ("named_group_digit_name", "(?P<1a>b)"),
    ("named_group_duplicate", "(?P<n>a)(?P<n>b)"),
    ("unknown_flag", "(?z)a"),
    ("unclosed_flags", "(?i"),
    ("comment_group", "(?#note)a"),
    ("backreference", "(a)\\1"),
    ("named_backreference", "(?<n>a)\\k<n>"),
    ("lookahead", "(?=a)a"),
    ("negative_lookahead", "(?!a)b"),
    ("lookbehind", "(?<=a)b"),
    ("negative_lookbehind", "(?<!a)b"),
    ("unclosed_class_range", "[a-z"),
    ("unclosed_posix_class", "[[:alpha:]"),
    ("class_range_from_class", "[\\d-z]"),
    ("unclosed_noncapturing", "(?:a"),
    ("group_question_only", "(?"),
    ("close_before_open", "a)b("),
    ("repeat_open_comma", "a{,"),
    ("repeat_three_numbers", "x{1,2,3}"),
    ("lone_star", "*"),
    ("lone_repeat", "{1}"),
    ("empty_flag_negation", "(?-)"),
    ("unclosed_unicode_class", "\\p{"),
    ("named_character_escape", "\\N{LATIN SMALL LETTER A}"),
    ("control_escape", "\\cA"),
    ("octal_backreference", "\\8"),
    ("python_named_backreference", "(?P<n>a)(?P=n)"),
    ("subroutine_call", "(a)\\g<1>"),
]


def _bad_regexes(count: int) -> list[Case]:
    return _spread("bad_regex", _BAD_REGEXES, REGEX_CHANNELS, count)


# --- invalid Lark grammars (52) -------------------------------------------------------------

_BAD_GRAMMARS: list[tuple[str, str]] = [
    ("empty", ""),
    ("whitespace_only", "  \n\t\n"),
    ("comment_only", "// nothing here\n"),
    ("no_start_rule", 'foo: "a"'),
    ("capitalized_start", 'Start: "a"'),
    ("undefined_rule", "start: foo"),
    ("undefined_in_alternative", 'start: "a" | bar'),
    ("undefined_several", "start: a b c"),
    ("undefined_terminal", 'start: A\nA: B "x"'),
    ("recursive_terminal", 'start: A\nA: "a" A'),
    ("unterminated_string", 'start: "a" "b'),
    ("missing_colon", 'start "a"'),
    ("no_rule_name", ': "a"'),
    ("unbalanced_paren", 'start: ("a" | "b"'),
    ("extra_close_paren", 'start: "a")'),
    ("unclosed_bracket", 'start: ["a"'),
    ("bad_regex_terminal_range", "start: /[a-/"),
    ("bad_regex_terminal_paren", "start: /(/"),
    ("unterminated_regex", "start: /abc"),
    ("repeat_min_over_max", 'start: "a"~5..1'),
    ("double_operator", 'start: "a" ** 3'),
    ("arrow_instead_of_colon", 'start -> "a"'),
    ("ebnf_assign", 'start := "a"'),
    ("gbnf_syntax", 'root ::= "a" | "b"'),
    ("duplicate_start", 'start: "a"\nstart: "b"'),
    ("unknown_directive", '%frobnicate foo\nstart: "a"'),
    ("import_missing_module", "%import nosuchmodule.FOO\nstart: FOO"),
    ("ignore_undefined", 'start: "a"\n%ignore UNDEFINED_WS'),
    ("json_inline_bad_schema", 'start: %json { "type": "nonsense" }'),
    ("json_inline_unclosed", "start: %json {"),
    ("unknown_special_token", "start: <|no_such_special_token|>"),
    ("control_characters", "\x00\x01\x02"),
    ("serialized_empty_grammars", '{"grammars": []}'),
    ("serialized_wrong_shape", '{"grammars": 5}'),
    ("serialized_undefined_rule", '{"grammars": [{"lark_grammar": "start: foo"}]}'),
    ("uppercase_start_terminal", 'START: "a"'),
    ("duplicate_start_optional", 'start: "a"\n?start: "b"'),
    ("trailing_paren_after_sequence", 'start: "a" "b" )'),
    ("lazy_marker_after_plus", 'start: "a"+?'),
    ("string_bad_escape", 'start: "\\q"'),
    ("regex_terminal_lookahead", "start: /(?=a)b/"),
    ("import_missing_common", "%import common.NOPE\nstart: NOPE"),
    ("regex_extension_bad_option", 'start: %regex {"substring_words": 5}'),
    ("token_id_out_of_range", "start: <[99999999]>"),
    ("missing_subgrammar", "start: @missing_grammar"),
    ("json_inline_missing_ref", 'start: %json {"$ref": "#/$defs/none"}'),
]


def _bad_grammars(count: int) -> list[Case]:
    return _spread("bad_grammar", _BAD_GRAMMARS, GRAMMAR_CHANNELS, count)


# --- bad choice lists (30) ------------------------------------------------------------------

_BAD_CHOICES: list[tuple[str, Any]] = [
    ("empty_list", []),
    ("ints", [1, 2]),
    ("mixed_string_int", ["a", 1]),
    ("floats", [1.5]),
    ("bools", [True, False]),
    ("nulls", [None]),
    ("string_and_null", ["a", None]),
    ("nested_lists", [["a"], ["b"]]),
    ("nested_empty_list", [[]]),
    ("objects", [{"a": 1}]),
    ("string_not_list", "a"),
    ("comma_string_not_list", "yes,no"),
    ("object_not_list", {"a": "b"}),
    ("int_not_list", 5),
    ("true_not_list", True),
]


def _bad_choices(count: int) -> list[Case]:
    return _spread("bad_choice", _BAD_CHOICES, CHOICE_CHANNELS, count)


# --- two constraints at once (30) -----------------------------------------------------------


def _two_constraints() -> list[Case]:
    cases: list[Case] = []
    # Pairs of request fields (response_format's two kinds count as two; structured_outputs
    # takes each of its kinds in turn, so every kind is paired).
    so_kinds = [k for k in GOOD_KINDS if k.startswith("structured_outputs.")]
    slots = [
        "response_format.json_object",
        "response_format.json_schema",
        "structured_outputs",
        "guided_json",
        "guided_regex",
        "guided_choice",
        "guided_grammar",
    ]
    turn = 0
    for a, b in combinations(slots, 2):
        if a.startswith("response_format") and b.startswith("response_format"):
            continue  # one field: cannot carry both
        pair = []
        for slot in (a, b):
            if slot == "structured_outputs":
                slot = so_kinds[turn % len(so_kinds)]
                turn += 1
            pair.append(slot)
        fields = {**GOOD_KINDS[pair[0]], **GOOD_KINDS[pair[1]]}
        cases.append((f"two_constraints/{pair[0]}+{pair[1]}", fields))
    # Two kinds inside one structured_outputs object.
    inner = {
        "json": GOOD_SCHEMA,
        "regex": GOOD_REGEX,
        "choice": GOOD_CHOICE,
        "grammar": GOOD_GRAMMAR,
        "json_object": True,
    }
    for a, b in combinations(inner, 2):
        fields = {"structured_outputs": {a: inner[a], b: inner[b]}}
        cases.append((f"two_constraints/structured_outputs.{a}+{b}", fields))
    return cases


# --- a constraint with beam search (12) -----------------------------------------------------


def _with_beam_search() -> list[Case]:
    # n=2 and temperature 0 make the beam search itself valid: only the constraint is wrong.
    beam = {"use_beam_search": True, "n": 2, "temperature": 0}
    return [(f"beam_search/{kind}", {**beam, **fields}) for kind, fields in GOOD_KINDS.items()]


# --- huge inputs (12), built here rather than stored ---------------------------------------


def _nested_schema(depth: int, key: str) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        if key == "items":
            schema = {"type": "array", "items": schema}
        else:
            schema = {"type": "object", "properties": {key: schema}, "required": [key]}
    return schema


def _huge() -> list[Case]:
    rng = random.Random(0)
    # 60,000 properties: over 2 MB of JSON.
    wide = {
        "type": "object",
        "properties": {f"p{i:05d}": {"type": "string", "maxLength": 8} for i in range(60_000)},
    }
    deep = _nested_schema(300, "a")
    deep_items = _nested_schema(300, "items")
    letters = "abcdefghijklmnopqrstuvwxyz"
    # 200,000 characters, broken at the very end: refused on content whatever the size limit.
    literal = "".join(rng.choice(letters) for _ in range(199_999)) + "("
    words = ["".join(rng.choice(letters) for _ in range(4)) for _ in range(40_000)]
    alternation = "(?:" + "|".join(words) + "))"  # 200,004 characters, one ")" too many
    nested_groups = "(" * 100_000 + ")" * 100_000  # 200,000 characters, 100,000 deep
    choices = [f"choice{i}" for i in range(100_000)]
    # About 1 MiB of Lark each: many small rules, or one rule of many alternatives.
    rules = ["start: " + " | ".join(f"r{i}" for i in range(42_000))]
    rules += [f'r{i}: "w{i}"' for i in range(42_000)]
    many_rules = "\n".join(rules)
    big_alternation = "start: " + " | ".join(f'"{w}{i}"' for i, w in enumerate(words * 2))
    return [
        ("huge/schema_60000_properties/response_format", _json_schema_format(wide)),
        (
            "huge/schema_60000_properties/structured_outputs.json_text",
            {"structured_outputs": {"json": json.dumps(wide)}},
        ),
        ("huge/schema_nested_300_objects/guided_json", {"guided_json": deep}),
        (
            "huge/schema_nested_300_objects/structured_outputs.json",
            {"structured_outputs": {"json": deep}},
        ),
        ("huge/schema_nested_300_arrays/response_format", _json_schema_format(deep_items)),
        (
            "huge/regex_200000_literal_unclosed_group/structured_outputs.regex",
            {"structured_outputs": {"regex": literal}},
        ),
        ("huge/regex_200000_alternation_extra_paren/guided_regex", {"guided_regex": alternation}),
        (
            "huge/regex_100000_nested_groups/structured_outputs.regex",
            {"structured_outputs": {"regex": nested_groups}},
        ),
        (
            "huge/choice_100000/structured_outputs.choice",
            {"structured_outputs": {"choice": choices}},
        ),
        ("huge/choice_100000/guided_choice", {"guided_choice": choices}),
        (
            "huge/grammar_1mb_rules/structured_outputs.grammar",
            {"structured_outputs": {"grammar": many_rules}},
        ),
        ("huge/grammar_1mb_alternation/guided_grammar", {"guided_grammar": big_alternation}),
    ]


def bad_constraints() -> list[tuple[str, dict]]:
    """Exactly 500 (label, request fields) output constraints the API must refuse with 400."""
    cases = (
        _wrong_types()
        + _missing_type_or_schema()
        + _invalid_schemas(100)
        + _unsatisfiable(60)
        + _bad_regexes(72)
        + _bad_grammars(52)
        + _bad_choices(30)
        + _two_constraints()
        + _with_beam_search()
        + _huge()
    )
    labels = [label for label, _ in cases]
    if len(cases) != TOTAL or len(set(labels)) != TOTAL:
        raise AssertionError(f"{len(cases)} cases, {len(set(labels))} unique labels")
    return cases
