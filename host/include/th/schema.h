/* th/schema.h - LLM-ready tool descriptions: the JSON Schema of a tool's
 * parameters, the detailed description for prompts, the function-calling
 * exports (OpenAI, Anthropic, plain JSON Schema) and the tools.list entry
 * for msgpack-RPC, all from one schema builder (docs/descriptions.md).
 *
 * Everything here reads host-owned th_tool/th_param structs and allocates
 * fresh results; nothing is cached, so every function is safe from any
 * thread as long as the tools stay alive (hold them pinned or the registry
 * read-locked).  Ownership: a returned json_t* is a new reference (the
 * caller json_decref()s it); a returned char* is malloc()ed (free() it).
 * NULL means out of memory unless said otherwise.
 */
#ifndef TH_SCHEMA_H
#define TH_SCHEMA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "th/err.h"
#include "th/tool.h"

struct msgpack_packer;

typedef enum th_export_format {
    TH_EXPORT_OPENAI = 1,  /* [{"type":"function","function":{name,
                              description, parameters}}, ...]            */
    TH_EXPORT_ANTHROPIC,   /* [{name, description, input_schema}, ...]    */
    TH_EXPORT_JSONSCHEMA,  /* {name: schema (with $schema, title,
                              description), ...}                         */
    TH_EXPORT_OPENAI_RESPONSES, /* the Responses API: [{"type": "function",
                              name, description, parameters, strict}]    */
    TH_EXPORT_GEMINI       /* one Gemini Tool: {"functionDeclarations":
                              [{name, description, parameters}, ...]},
                              parameters in the OpenAPI 3.0 subset Gemini
                              reads (th_schema_gemini)                   */
} th_export_format;

/* OpenAI's function description limit (characters); the openai export
 * keeps the description within it. */
#define TH_SCHEMA_OPENAI_DESC_MAX 1024

/* "openai", "openai-responses", "anthropic", "jsonschema", "gemini" and
 * back; 0 / NULL when unknown. */
th_export_format th_export_format_from_name(const char *name);
const char *th_export_format_name(th_export_format f);

/* The JSON Schema of the tool's parameters: {"type": "object",
 * "properties": {name: {type, description, enum?, items?, default?,
 * minimum?, maximum?, exclusiveMinimum?, exclusiveMaximum?, minLength?,
 * maxLength?, pattern?, minItems?, maxItems?}}, "required": [...] (left
 * out when empty), "additionalProperties": false}, properties in
 * declaration order.  A parameter with schema_json (ABI 1.1) starts from
 * that schema as is (its properties, required, ...), the keywords above
 * put over it. */
json_t *th_schema_params(const th_tool *tool);

/* The tool's output_schema (ABI 1.1) as JSON (caller json_decref()s), or
 * NULL when it has none: MCP's outputSchema. */
json_t *th_schema_output(const th_tool *tool);
/* The tags the tool's plugin declares (ABI 1.5) as a JSON array of
 * strings (caller json_decref()s), or NULL when it declares none (or out
 * of memory): tools.list "tags", MCP _meta "toolhost/tags", the
 * jsonschema export's "x-toolhost-tags". */
json_t *th_schema_tags(const th_tool *tool);
/* Whether an output schema (th_schema_output) describes an object
 * ({"type":"object",...}): MCP lists outputSchema, and returns
 * structuredContent, only for those. */
bool th_schema_output_is_object(const json_t *schema);
/* The same for a tool's own output schema (false when it has none),
 * parsed once per tool: what a call (MCP tools/call) asks. */
bool th_schema_tool_output_object(const th_tool *tool);

/* A bound as JSON: an integer for an integer parameter when exact. */
json_t *th_schema_number(uint32_t type, double v);

/* The description for function-calling APIs: the one-line description,
 * then the long description (normalized, sections kept) after a blank
 * line.  max_chars > 0 keeps it within that many characters (code
 * points), dropping whole trailing paragraphs first. */
char *th_schema_description(const th_tool *tool, size_t max_chars);

/* The detailed description for prompts and `toolhost describe`:
 * "# name", the description, the long description with its sections, a
 * "## Parameters" list, and "## Output" (semantic types and flags). */
char *th_schema_describe(const th_tool *tool);

/* The tools in the export format, sorted by name (a stable order whatever
 * order `tools` has).  NULL with err set (TH_EINVAL for an unknown format,
 * TH_ENOMEM). */
json_t *th_schema_export(const th_tool *const *tools, size_t n,
                         th_export_format fmt, th_error *err);
/* The same as JSON text, indented by 2, with a final newline. */
char *th_schema_export_text(const th_tool *const *tools, size_t n,
                            th_export_format fmt, th_error *err);

/* Packs the tools.list entry of one tool as a msgpack map: name,
 * description, long_description (nil when absent), parameters (the JSON
 * Schema of th_schema_params, converted with th_json_pack), stdout_type
 * and stderr_type (names such as "file_content"), flags (a list of names
 * such as "read_only").  0 or TH_ENOMEM. */
int th_schema_pack_tool(struct msgpack_packer *pk, const th_tool *tool);

/* The MCP tools/list entry of one tool: {name, description, inputSchema,
 * annotations {readOnlyHint, destructiveHint, idempotentHint,
 * openWorldHint}, execution {taskSupport}}, from the same builders as the
 * exports.  NULL when out of memory. */
json_t *th_schema_mcp_tool(const th_tool *tool);

/* th_schema_description() within max_chars that still names every tool a
 * "## Tools" section of the long description lists (run_code): the
 * section becomes one paragraph of names, the rest is cut by paragraphs
 * to make room.  The openai exports use it. */
char *th_schema_description_fit(const th_tool *tool, size_t max_chars);

/* A strict-mode copy of a parameters schema: every property required,
 * optional ones nullable ("type": [T, "null"], null added to an enum),
 * additionalProperties false, "default" moved into the description;
 * recursively.  NULL when out of memory. */
json_t *th_schema_strict(const json_t *schema);

/* A parameters schema in the OpenAPI 3.0 subset Gemini's function
 * declarations read: a list of types becomes one type (+ "nullable") or
 * "anyOf"; "const" a one-value "enum"; "oneOf" "anyOf"; "examples" one
 * "example"; a non-string enum, "exclusiveMinimum"/"exclusiveMaximum",
 * "additionalProperties", "$ref" and the other keywords Gemini refuses are
 * left out (the host still validates every argument against the whole
 * schema).  A new reference; NULL when out of memory. */
json_t *th_schema_gemini(const json_t *schema);

typedef struct th_export_opts {
    bool strict; /* openai, openai-responses: strict schemas, strict: true */
} th_export_opts;
/* th_schema_export() with options; strict is refused (TH_EINVAL) for the
 * formats other than openai and openai-responses. */
json_t *th_schema_export_ex(const th_tool *const *tools, size_t n,
                            th_export_format fmt, const th_export_opts *o,
                            th_error *err);
char *th_schema_export_text_ex(const th_tool *const *tools, size_t n,
                               th_export_format fmt, const th_export_opts *o,
                               th_error *err);


#endif
