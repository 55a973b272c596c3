// json_schema: JSON Schemas (and "any JSON object", response_format
// json_object) turned into grammars whose strings are exactly the JSON
// texts that validate, the way xgrammar and vLLM's structured outputs read
// a schema (exceptions below).
//
// Supported (what OpenAI's strict mode accepts, and more):
//   - type: object, array, string, number, integer, boolean, null, or a
//     list of these (alternatives, each with its own keywords); no type:
//     the types the other keywords belong to (properties / required /
//     additionalProperties: object; items / prefixItems / minItems /
//     maxItems: array; minLength / maxLength / pattern / format: string;
//     minimum / maximum / exclusive*: number), any JSON value when none;
//   - object: properties (emitted in the schema's order), required (the
//     others optional), additionalProperties (false; true or absent: more
//     keys with any value, unless the strict option; a schema: more keys
//     of that schema), an empty schema {} for any value. Additional pairs
//     come after the listed properties and their keys are any strings (a
//     listed name is not excluded, so it could appear twice). A required
//     name missing from properties is required at the end, with the
//     additionalProperties schema (an error when that is false). Keys are
//     matched as the schema spells them (canonical escaping only);
//   - array: items (a schema, or false; draft 4's array form is read as
//     prefixItems followed by any values), prefixItems, minItems, maxItems;
//   - string: minLength, maxLength (characters: a codepoint or one escape,
//     so a surrogate-pair escape counts two), pattern (grammar/regex.h,
//     anchored at both ends) and format (date, time, date-time, email,
//     uuid, ipv4, uri as regexes). A pattern matches the raw JSON text
//     between the quotes, escapes unexpanded (as xgrammar does): it is the
//     author's to keep '"', '\' and control characters out of it, as a
//     pattern that admits them admits invalid JSON. With pattern or format
//     the lengths are not checked; pattern wins over format;
//   - integer: minimum, maximum, exclusiveMinimum, exclusiveMaximum (the
//     numeric form, or draft 4's boolean) as exact digit-by-digit ranges
//     (bounds within int64, non-integer bounds rounded inwards; "-0" is
//     not spelled inside a range);
//   - number: the bounds only as the sign they imply (a lower bound >= 0:
//     no '-'; an upper bound < 0, or an exclusive one of 0: a '-'); their
//     values are otherwise not checked;
//   - enum and const (any JSON values, written compactly with the
//     separators and whitespace of the options; strings in canonical
//     escaping; a float in its shortest form, an integral one also with
//     ".0"), only the values of a sibling "type"; other sibling keywords
//     are not checked;
//   - anyOf, oneOf (as anyOf), allOf of one schema (each with no sibling
//     keyword but annotations); $ref to "#" and "#/$defs/..." /
//     "#/definitions/..." (any local JSON pointer) including recursion;
//     the siblings of a $ref are ignored (as draft 7 says).
// No whitespace is admitted before or after the root value.
// Annotations (title, description, default, examples, $schema, $id,
// $comment, deprecated, readOnly, writeOnly) and the containers $defs and
// definitions are ignored. Any other keyword is an error naming it and
// where it is ("JSON Schema: unsupported keyword 'not' at /properties/a";
// "at the root" for the root). So are malformed keyword values ("'minItems'
// must be a non-negative integer at /items"), unresolved or non-local
// $refs, unknown formats, and invalid JSON ("JSON Schema: invalid JSON at
// byte N: <simdjson's message>"). A false schema, or one nothing
// satisfies, becomes a grammar that admits no string (compiling it fails).
#pragma once

#include <string_view>

#include "common/result.h"
#include "grammar/grammar.h"

namespace troupe::grammar {

struct json_options {
  // Between tokens: any JSON whitespace ([ \n\t]*) when true; otherwise
  // the compact form (no whitespace, one space after ':' and ',' as
  // Python's json.dumps when compact_separators is false).
  bool any_whitespace = true;
  bool compact_separators = true;  // only with any_whitespace false
  // additionalProperties absent means false (as OpenAI's strict mode
  // requires it to be written); otherwise absent means true.
  bool strict = false;
  // Bound on the whitespace run between two tokens (-1: none), so that a
  // model cannot fill max_tokens with spaces.
  int32_t max_whitespace = 20;
};

// The grammar of the JSON texts the schema (itself JSON text) accepts.
result<grammar> json_schema_grammar(std::string_view schema, const json_options& options);

// Any JSON object (response_format {"type": "json_object"}).
grammar json_object_grammar(const json_options& options);

}  // namespace troupe::grammar
