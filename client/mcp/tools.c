/* tools.c: the tools this server offers: each one's name, description and
 * JSON Schema (written as JSON, parsed by jansson once per server), and
 * tools/call's dispatch. The descriptions are for a model deciding what
 * to call: they say what the sandbox is, what comes back, and the limits. */
#include <string.h>

#include "mcp_internal.h"

struct tool {
  const char *name;
  const char *title;
  const char *description;
  const char *input_schema;  /* JSON */
  const char *output_schema; /* JSON, or NULL: no structuredContent */
  bool read_only, destructive, idempotent, open_world;
  json_t *(*call)(mcp_server *s, struct mcp_call *call, const json_t *args);
};

/* Session ids are the server's to make, not the model's to invent: a
 * name a model picks ("nb", "demo") is one the next model picks too. The
 * id's syntax is args.c's to check (with an error naming the argument),
 * not the schema's: a model that copies an id needs no pattern.
 *
 * Every byte below is in an agent's context on every turn: say each fact
 * once, where the model looks for it (the tool's description for what the
 * tool does and how sessions behave, a property's description only for
 * what its name and type do not say), and keep tools/list under the budget
 * tests/fronts/mcp/tools.test.mjs measures. */
#define SESSION_ID_SCHEMA                                                                          \
  "{\"type\": \"string\", \"description\": \"A session_id run_code returned (do not make one "     \
  "up).\"}"

static const char run_code_description[] =
    "Run code (Python 3 unless language) in an isolated sandbox (no network unless allow_net) and "
    "get back stdout, "
    "stderr, how it ended, result (the repr of a last expression that is not None) and the files "
    "it wrote to output/.\n"
    "The code runs as /workspace/main.py in /workspace; input files are under mounts/. Files left "
    "in output/ come back, images as images; so do matplotlib figures shown with plt.show() or "
    "left open (output/figure-N.png).\n"
    "Without a session each run gets a fresh workspace. Give session_mode and no session_id to "
    "start a session, and its returned session_id to later calls: the workspace's files are kept "
    "until close_session or idle expiry; one run at a time. session_mode 'interpreter' also "
    "keeps one live Python (variables, imports): each call runs like a notebook cell. A cell "
    "reaching limits.timeout_ms gets KeyboardInterrupt and the state is kept; if it ignores "
    "that, the interpreter is killed. A lost state (that kill, idle, the memory limit, server "
    "load) is reported as state_lost; files are kept. No requirements in interpreter sessions.\n"
    "A failed, killed or refused run is a result with isError and hints.";

static const char run_code_schema[] =
    "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"code\"],"
    " \"properties\": {"
    "  \"code\": {\"type\": \"string\"},"
    "  \"language\": {\"type\": \"string\", \"description\": \"e.g. bash\"},"
    "  \"version\": {\"type\": \"string\", \"description\": \"semver range\"},"
    "  \"requirements\": {\"type\": \"array\", \"items\": {\"type\": \"string\"},"
    "   \"description\": \"pip specifiers installed first (cached), e.g. 'pandas==2.2.2'; no "
    "options or URLs.\"},"
    "  \"files\": {\"type\": \"array\", \"description\": \"Input files, written under mounts/.\","
    "   \"items\": {\"type\": \"object\", \"additionalProperties\": false, \"required\": "
    "[\"path\"], \"properties\": {"
    "    \"path\": {\"type\": \"string\", \"description\": \"Relative to mounts/, e.g. "
    "'data/in.csv'.\"},"
    "    \"content\": {\"type\": \"string\", \"description\": \"Give content or url.\"},"
    "    \"encoding\": {\"type\": \"string\", \"enum\": [\"utf-8\", \"base64\"]},"
    "    \"url\": {\"type\": \"string\", \"description\": \"http(s), downloaded by the "
    "server.\"}}}},"
    "  \"session_id\": " SESSION_ID_SCHEMA ","
    "  \"session_mode\": {\"type\": \"string\", \"enum\": [\"files\", \"interpreter\"], "
    "\"description\": \"Set by the call that starts the session.\"},"
    "  \"stdin\": {\"type\": \"string\"},"
    "  \"stdin_encoding\": {\"type\": \"string\", \"enum\": [\"utf-8\", \"base64\"]},"
    "  \"args\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"description\": "
    "\"sys.argv[1:]\"},"
    "  \"allow_net\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"description\": "
    "\"Hosts the code may reach, e.g. pypi.org, *.example.com:443.\"},"
    "  \"env\": {\"type\": \"object\", \"additionalProperties\": {\"type\": \"string\"}},"
    "  \"limits\": {\"type\": \"object\", \"additionalProperties\": false, \"description\": "
    "\"Omitted: the server's default; over its maximum: refused.\", \"properties\": {"
    "    \"timeout_ms\": {\"type\": \"integer\", \"minimum\": 1, \"description\": \"Wall "
    "clock.\"},"
    "    \"cpu_time_ms\": {\"type\": \"integer\", \"minimum\": 1},"
    "    \"memory_mb\": {\"type\": \"integer\", \"minimum\": 1, \"description\": \"Or "
    "memory_bytes.\"},"
    "    \"memory_bytes\": {\"type\": \"integer\", \"minimum\": 1},"
    "    \"output_bytes\": {\"type\": \"integer\", \"minimum\": 1, \"description\": \"Each of "
    "stdout and stderr.\"},"
    "    \"max_processes\": {\"type\": \"integer\", \"minimum\": 1},"
    "    \"disk_bytes\": {\"type\": \"integer\", \"minimum\": 1, \"description\": \"The "
    "workspace.\"},"
    "    \"open_files\": {\"type\": \"integer\", \"minimum\": 1}}}}}";

/* structuredContent of run_code (result.c: run_structured). */
static const char run_code_output_schema[] =
    "{\"type\": \"object\", \"required\": [\"status\", \"killed_by\", \"exit_code\", "
    "\"signal\", \"run_id\", \"stdout\", \"stderr\", \"result\", \"state_lost\", "
    "\"interpreter_ended\", \"artifacts\"], \"properties\": {"
    "  \"status\": {\"type\": \"string\", \"enum\": [\"ok\", \"error\", \"killed\"]},"
    "  \"killed_by\": {\"type\": \"string\", \"enum\": [\"none\", \"timeout\", \"memory\", "
    "\"output_limit\", \"signal\", \"cancelled\"]},"
    "  \"exit_code\": {\"type\": \"integer\"}, \"signal\": {\"type\": \"integer\"},"
    "  \"run_id\": {\"type\": \"string\"}, \"session_id\": {\"type\": \"string\"},"
    "  \"session_created\": {\"type\": \"boolean\"},"
    "  \"session_mode\": {\"type\": \"string\", \"enum\": [\"files\", \"interpreter\"]},"
    "  \"wall_time_ms\": {\"type\": \"integer\"}, \"cpu_time_ms\": {\"type\": \"integer\"},"
    "  \"peak_memory_bytes\": {\"type\": \"integer\"},"
    "  \"stdout\": {\"type\": \"string\"}, \"stdout_truncated\": {\"type\": \"boolean\"},"
    "  \"stderr\": {\"type\": \"string\"}, \"stderr_truncated\": {\"type\": \"boolean\"},"
    "  \"result\": {\"type\": \"string\"}, \"result_truncated\": {\"type\": \"boolean\"},"
    "  \"state_lost\": {\"type\": \"boolean\", \"description\": \"This call ran in a fresh "
    "interpreter: earlier variables are gone.\"},"
    "  \"interpreter_ended\": {\"type\": \"boolean\", \"description\": \"This call ended the "
    "interpreter.\"},"
    "  \"feedback\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}},"
    "  \"artifacts\": {\"type\": \"array\", \"items\": {\"type\": \"object\", \"required\": "
    "[\"path\", \"mime\", \"size\", \"attached\"], \"properties\": {"
    "    \"path\": {\"type\": \"string\"}, \"mime\": {\"type\": \"string\"},"
    "    \"size\": {\"type\": \"integer\"},"
    "    \"attached\": {\"type\": \"string\", \"enum\": [\"image\", \"text\", \"binary\", "
    "\"omitted\", \"over_cap\"]}}}},"
    "  \"egress\": {\"type\": \"object\", \"properties\": {\"connections\": {\"type\": "
    "\"integer\"}, \"refused\": {\"type\": \"integer\"}, \"bytes_up\": {\"type\": \"integer\"}, "
    "\"bytes_down\": {\"type\": \"integer\"}}}}}";

static const char list_description[] =
    "List one directory of a session's workspace (/workspace: main.py, mounts/, output/). Not "
    "recursive; symlinks are shown, not followed.";

static const char list_schema[] =
    "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"session_id\"],"
    " \"properties\": {\"session_id\": " SESSION_ID_SCHEMA ","
    "  \"path\": {\"type\": \"string\", \"description\": \"Relative to /workspace, e.g. 'output'; "
    "default '.'.\"}}}";

static const char preview_description[] =
    "Show a file of a session's workspace: text (max_bytes from offset, default 16384 from 0), "
    "images as images, other files by size.";

static const char preview_schema[] =
    "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"session_id\", "
    "\"path\"], \"properties\": {\"session_id\": " SESSION_ID_SCHEMA ","
    "  \"path\": {\"type\": \"string\", \"description\": \"Relative to /workspace, e.g. "
    "'output/r.csv'.\"},"
    "  \"max_bytes\": {\"type\": \"integer\", \"minimum\": 1},"
    "  \"offset\": {\"type\": \"integer\", \"minimum\": 0}}}";

static const char close_description[] =
    "End a session: its workspace, its files and its interpreter are gone. Call it when done.";

static const char close_schema[] =
    "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"session_id\"],"
    " \"properties\": {\"session_id\": " SESSION_ID_SCHEMA "}}";

static const struct tool tools[] = {
    {"run_code", "Run Python code in a sandbox", run_code_description, run_code_schema,
     run_code_output_schema, false, false, false, true, mcp_tool_run_code},
    {"list_session_files", "List a session's files", list_description, list_schema, NULL, true,
     false, true, false, mcp_tool_list_session_files},
    {"preview_file", "Preview a session's file", preview_description, preview_schema, NULL, true,
     false, true, false, mcp_tool_preview_file},
    {"close_session", "Close a session", close_description, close_schema, NULL, false, true, true,
     false, mcp_tool_close_session},
};

/* The title once, at the top: since 2025-06-18 it takes precedence over
 * annotations.title, which would only repeat it in the model's context. */
static json_t *tool_json(const struct tool *t) {
  json_error_t jerr;
  json_t *schema = json_loads(t->input_schema, JSON_REJECT_DUPLICATES, &jerr);
  if (schema == NULL)
    return NULL;
  json_t *output = NULL;
  if (t->output_schema != NULL &&
      (output = json_loads(t->output_schema, JSON_REJECT_DUPLICATES, &jerr)) == NULL) {
    json_decref(schema);
    return NULL;
  }
  json_t *tool =
      json_pack("{s:s, s:s, s:s, s:o, s:{s:b, s:b, s:b, s:b}}", "name", t->name, "title", t->title,
                "description", t->description, "inputSchema", schema, "annotations", "readOnlyHint",
                t->read_only, "destructiveHint", t->destructive, "idempotentHint", t->idempotent,
                "openWorldHint", t->open_world);
  if (tool != NULL && output != NULL && json_object_set_new(tool, "outputSchema", output) < 0) {
    json_decref(tool);
    return NULL;
  }
  if (tool == NULL)
    json_decref(output);
  return tool;
}

json_t *mcp_tools_list(void) {
  json_t *list = json_array();
  for (size_t i = 0; list != NULL && i < sizeof(tools) / sizeof(tools[0]); i++)
    if (json_array_append_new(list, tool_json(&tools[i])) < 0) {
      json_decref(list);
      list = NULL;
    }
  return list;
}

json_t *mcp_tools_call(mcp_server *s, struct mcp_call *call, const char *name, size_t name_len,
                       const json_t *args, bool *unknown) {
  *unknown = false;
  for (size_t i = 0; i < sizeof(tools) / sizeof(tools[0]); i++)
    if (strlen(tools[i].name) == name_len && memcmp(tools[i].name, name, name_len) == 0)
      return tools[i].call(s, call, args);
  *unknown = true;
  return NULL;
}
