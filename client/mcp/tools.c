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
 * name a model picks ("nb", "demo") is one the next model picks too. */
#define SESSION_ID_SCHEMA                                                                          \
  "{\"type\": \"string\", \"pattern\": \"^[A-Za-z0-9._-]{1,64}$\", "                               \
  "\"description\": \"The session: the session_id a run_code call returned (do not make one "      \
  "up).\"}"
#define RUN_SESSION_ID_SCHEMA                                                                      \
  "{\"type\": \"string\", \"pattern\": \"^[A-Za-z0-9._-]{1,64}$\", "                               \
  "\"description\": \"The session to run in: the session_id an earlier run_code call returned "    \
  "(do not make one up). To start a session, leave session_id out and give session_mode: the "     \
  "result gives the new session's session_id.\"}"

static const char run_code_description[] =
    "Run Python 3 code in an isolated sandbox (no network unless allow_net names hosts, its own "
    "filesystem) and get back "
    "what it printed, the value of its last expression, how it ended, and the files it wrote to "
    "output/.\n"
    "The code runs as /workspace/main.py with /workspace as its working directory. Input files "
    "(files) appear under /workspace/mounts/. Every regular file the program leaves in "
    "/workspace/output/ comes back: images (PNG, JPEG, GIF, WebP, SVG) as images, other files "
    "as embedded resources. Matplotlib figures shown with plt.show() or still open at the end "
    "come back as images too (output/figure-N.png), but a figure the code saved itself comes "
    "back once, as the file it saved: plt.savefig('output/name.png') picks the name. When the code "
    "ends with an expression whose value is not None, its repr comes back "
    "as result (like a notebook cell's output).\n"
    "Without session_id and session_mode every run starts in a fresh, empty workspace that is "
    "gone afterwards. A session keeps its workspace (and its files) between runs until "
    "close_session or a while without calls; one run per session at a time. To start one, call "
    "run_code with session_mode and without session_id: the result gives the new session's "
    "session_id (an unguessable id made for you); pass it to the later calls.\n"
    "session_mode 'interpreter' (chosen by the call that creates the session, "
    "later calls may leave it out) keeps one live Python per session: variables, imports and "
    "loaded data persist between calls of that session_id, each call runs like a notebook cell "
    "in it, and the value of its last expression comes back as result. A cell that reaches "
    "limits.timeout_ms gets KeyboardInterrupt and the state is kept; if the cell ignores it, "
    "the interpreter is killed and the next call starts a fresh one and says the state was lost "
    "(files are kept). The state is lost too after a long idle time, at the memory limit of "
    "the call that started it, or when the server needs the room; the result says so "
    "(state_lost). requirements are not available in interpreter sessions. Without "
    "session_mode (or 'files') each call is a new Python process.\n"
    "The result is an error (isError) when the program exited with a nonzero status, was "
    "killed at a limit (timeout, memory, output) or by a signal, or the call was refused; the "
    "text says which, with hints (e.g. a missing module to add to requirements).";

static const char run_code_schema[] =
    "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"code\"],"
    " \"properties\": {"
    "  \"code\": {\"type\": \"string\", \"description\": \"The Python 3 program to run.\"},"
    "  \"requirements\": {\"type\": \"array\", \"items\": {\"type\": \"string\"},"
    "   \"description\": \"pip requirements to install first, each a plain specifier such as "
    "'numpy' or 'pandas==2.2.2' (no options or URLs). Installed once per distinct set and cached."
    "\"},"
    "  \"files\": {\"type\": \"array\", \"description\": \"Input files, written under "
    "/workspace/mounts/ before the run.\", \"items\": {\"type\": \"object\","
    "   \"additionalProperties\": false, \"required\": [\"path\"], \"properties\": {"
    "    \"path\": {\"type\": \"string\", \"description\": \"Relative path below mounts/, e.g. "
    "'data/input.csv' (no '..', not absolute).\"},"
    "    \"content\": {\"type\": \"string\", \"description\": \"The file's content (give content "
    "or url).\"},"
    "    \"encoding\": {\"type\": \"string\", \"enum\": [\"utf-8\", \"base64\"], \"description\":"
    " \"How content is encoded: 'utf-8' text (default) or 'base64' for binary data.\"},"
    "    \"url\": {\"type\": \"string\", \"description\": \"An http(s) URL the server downloads "
    "the file from (give content or url).\"}}}},"
    "  \"session_id\": " RUN_SESSION_ID_SCHEMA ","
    "  \"session_mode\": {\"type\": \"string\", \"enum\": [\"files\", \"interpreter\"], "
    "\"description\": \"What the session keeps between calls; without session_id it starts a new "
    "session. 'files' (the "
    "default): the workspace's files; each call is a new Python process. 'interpreter': also "
    "one live Python: variables, imports and loaded data persist between calls, each call is a "
    "notebook cell, and its last expression's value is returned as result. Set by the call "
    "that creates the session.\"},"
    "  \"stdin\": {\"type\": \"string\", \"description\": \"Text given to the program on standard "
    "input.\"},"
    "  \"stdin_encoding\": {\"type\": \"string\", \"enum\": [\"utf-8\", \"base64\"], "
    "\"description\": \"How stdin is encoded: 'utf-8' text (default) or 'base64' for binary "
    "data.\"},"
    "  \"args\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"description\": "
    "\"Command-line arguments (sys.argv[1:]).\"},"
    "  \"allow_net\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"description\": "
    "\"Hosts the code may reach, e.g. [\\\"pypi.org\\\", \\\"*.example.com:443\\\"]; empty: no "
    "network.\"},"
    "  \"env\": {\"type\": \"object\", \"additionalProperties\": {\"type\": \"string\"}, "
    "\"description\": \"Environment variables for the program.\"},"
    "  \"limits\": {\"type\": \"object\", \"additionalProperties\": false, \"description\": "
    "\"Limits of this run; each left out takes the server's default, and the server refuses "
    "values above its maximum.\", \"properties\": {"
    "    \"timeout_ms\": {\"type\": \"integer\", \"minimum\": 1, \"description\": \"Wall-clock "
    "time limit in milliseconds.\"},"
    "    \"cpu_time_ms\": {\"type\": \"integer\", \"minimum\": 1, \"description\": \"CPU time "
    "limit in milliseconds.\"},"
    "    \"memory_mb\": {\"type\": \"integer\", \"minimum\": 1, \"description\": \"Memory limit "
    "in MiB (or memory_bytes, not both).\"},"
    "    \"memory_bytes\": {\"type\": \"integer\", \"minimum\": 1, \"description\": \"Memory "
    "limit in bytes.\"},"
    "    \"output_bytes\": {\"type\": \"integer\", \"minimum\": 1, \"description\": \"Limit of "
    "stdout and stderr, each, in bytes.\"},"
    "    \"max_processes\": {\"type\": \"integer\", \"minimum\": 1},"
    "    \"disk_bytes\": {\"type\": \"integer\", \"minimum\": 1, \"description\": \"Size of the "
    "workspace in bytes.\"},"
    "    \"open_files\": {\"type\": \"integer\", \"minimum\": 1}}}}}";

/* structuredContent of run_code (result.c: run_structured). */
static const char run_code_output_schema[] =
    "{\"type\": \"object\", \"required\": [\"status\", \"killed_by\", \"exit_code\", "
    "\"signal\", \"run_id\", \"stdout\", \"stderr\", \"result\", \"state_lost\", "
    "\"interpreter_ended\", \"artifacts\"], \"properties\": {"
    "  \"status\": {\"type\": \"string\", \"enum\": [\"ok\", \"error\", \"killed\"], "
    "\"description\": \"ok: exit code 0; error: a nonzero exit code; killed: stopped at a limit "
    "or by a signal.\"},"
    "  \"killed_by\": {\"type\": \"string\", \"enum\": [\"none\", \"timeout\", \"memory\", "
    "\"output_limit\", \"signal\", \"cancelled\"]},"
    "  \"exit_code\": {\"type\": \"integer\"}, \"signal\": {\"type\": \"integer\"},"
    "  \"run_id\": {\"type\": \"string\"}, \"session_id\": {\"type\": \"string\"},"
    "  \"session_created\": {\"type\": \"boolean\"},"
    "  \"session_mode\": {\"type\": \"string\", \"enum\": [\"files\", \"interpreter\"], "
    "\"description\": \"The session's mode (with a session only).\"},"
    "  \"wall_time_ms\": {\"type\": \"integer\"}, \"cpu_time_ms\": {\"type\": \"integer\"},"
    "  \"peak_memory_bytes\": {\"type\": \"integer\"},"
    "  \"stdout\": {\"type\": \"string\", \"description\": \"What the program printed (the "
    "middle left out past the server's cap; invalid UTF-8 replaced).\"},"
    "  \"stdout_truncated\": {\"type\": \"boolean\"},"
    "  \"stderr\": {\"type\": \"string\"}, \"stderr_truncated\": {\"type\": \"boolean\"},"
    "  \"result\": {\"type\": \"string\", \"description\": \"The repr of the code's last "
    "expression when it is one and not None (as a notebook shows it), else ''.\"},"
    "  \"result_truncated\": {\"type\": \"boolean\", \"description\": \"result was cut at "
    "the server's 64 KiB.\"},"
    "  \"state_lost\": {\"type\": \"boolean\", \"description\": \"Interpreter sessions: "
    "this call ran in a fresh interpreter; the variables, imports and data of earlier calls "
    "are gone (files are kept; feedback says why).\"},"
    "  \"interpreter_ended\": {\"type\": \"boolean\", \"description\": \"Interpreter "
    "sessions: this call ended the interpreter; the next call starts a fresh one (files are "
    "kept).\"},"
    "  \"feedback\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}},"
    "  \"artifacts\": {\"type\": \"array\", \"items\": {\"type\": \"object\", \"required\": "
    "[\"path\", \"mime\", \"size\", \"attached\"], \"properties\": {"
    "    \"path\": {\"type\": \"string\"}, \"mime\": {\"type\": \"string\"},"
    "    \"size\": {\"type\": \"integer\"},"
    "    \"attached\": {\"type\": \"string\", \"enum\": [\"image\", \"text\", \"binary\", "
    "\"omitted\", \"over_cap\"]}}}},"
    "  \"egress\": {\"type\": \"object\", \"description\": \"A run with allow_net: what it did "
    "on the network.\", \"properties\": {\"connections\": {\"type\": \"integer\"}, "
    "\"refused\": {\"type\": \"integer\"}, \"bytes_up\": {\"type\": \"integer\"}, "
    "\"bytes_down\": {\"type\": \"integer\"}}}}}";

static const char list_description[] =
    "List one directory of a session's workspace (/workspace: main.py, mounts/ with the input "
    "files, output/ with what the program wrote). Not recursive; symlinks are shown, never "
    "followed.";

static const char list_schema[] =
    "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"session_id\"],"
    " \"properties\": {\"session_id\": " SESSION_ID_SCHEMA ","
    "  \"path\": {\"type\": \"string\", \"description\": \"A directory relative to /workspace, "
    "e.g. 'output'; '' or '.' (default) for /workspace itself.\"}}}";

static const char preview_description[] =
    "Show a file of a session's workspace: text files as text (up to max_bytes from offset), "
    "images (PNG, JPEG, GIF, WebP, SVG) as images, other files described by size.";

static const char preview_schema[] =
    "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"session_id\", "
    "\"path\"], \"properties\": {\"session_id\": " SESSION_ID_SCHEMA ","
    "  \"path\": {\"type\": \"string\", \"description\": \"The file, relative to /workspace, e.g. "
    "'output/result.csv'.\"},"
    "  \"max_bytes\": {\"type\": \"integer\", \"minimum\": 1, \"description\": \"How much text "
    "to show (default 16384).\"},"
    "  \"offset\": {\"type\": \"integer\", \"minimum\": 0, \"description\": \"Where to start "
    "reading text (default 0).\"}}}";

static const char close_description[] =
    "End a session: its workspace and all its files are deleted. Later runs with the same "
    "session_id start a new, empty session.";

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
      json_pack("{s:s, s:s, s:s, s:o, s:{s:s, s:b, s:b, s:b, s:b}}", "name", t->name, "title",
                t->title, "description", t->description, "inputSchema", schema, "annotations",
                "title", t->title, "readOnlyHint", t->read_only, "destructiveHint", t->destructive,
                "idempotentHint", t->idempotent, "openWorldHint", t->open_world);
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
