/* runtimes: a manifest checked whole (every refusal names its key, each
 * cap taken at its edge and refused one past it), the runtimes directory
 * (name order, clashes naming both files, what is not a regular file),
 * and the one resolver every front asks (runtime by name, or language and
 * a version range). Manifests are written as text, one key changed from a
 * valid base, so each case shows the one thing it breaks. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "manifest.h"
#include "runtimes.h"

static struct sbx_error err;
static struct runtime_manifest m;

/* The base manifest's keys and their JSON values, in order. */
struct kv {
  const char *key;
  const char *value;
};
static const struct kv base[] = {
    {"name", "\"bash\""},
    {"language", "\"bash\""},
    {"aliases", "[\"sh\", \"shell\"]"},
    {"version", "{\"command\": [\"/usr/bin/bash\", \"--version\"], \"pattern\": "
                "\"version ([0-9]+\\\\.[0-9]+\\\\.[0-9]+)\"}"},
    {"file", "\"main.sh\""},
    {"run", "[\"/usr/bin/bash\", \"main.sh\"]"},
    {"self_test", "{\"code\": \"echo OK\\n\", \"stdout\": \"OK\\n\"}"},
};
#define N_BASE (sizeof base / sizeof base[0])

/* The base with key set to value (added if new; value NULL: removed).
 * The caller frees. */
static char *manifest_with(const char *key, const char *value) {
  size_t cap = 1 << 20;
  char *out = malloc(cap);
  assert_non_null(out);
  size_t used = (size_t)snprintf(out, cap, "{");
  bool seen = false;
  for (size_t i = 0; i < N_BASE; i++) {
    const char *v = base[i].value;
    if (key != NULL && strcmp(base[i].key, key) == 0) {
      seen = true;
      if ((v = value) == NULL)
        continue;
    }
    used += (size_t)snprintf(out + used, cap - used, "%s\"%s\": %s", used > 1 ? ", " : "",
                             base[i].key, v);
  }
  if (key != NULL && !seen && value != NULL)
    used += (size_t)snprintf(out + used, cap - used, ", \"%s\": %s", key, value);
  snprintf(out + used, cap - used, "}");
  assert_true(used + 1 < cap);
  return out;
}

static int parse_text(const char *text) {
  memset(&err, 0, sizeof err);
  int rv = runtime_manifest_parse(text, strlen(text), "t.json", &m, &err);
  if (rv < 0)
    assert_int_equal(err.code, SBX_INVALID_ARGUMENT);
  return rv;
}

static int parse_with(const char *key, const char *value) {
  char *text = manifest_with(key, value);
  int rv = parse_text(text);
  free(text);
  return rv;
}

/* key set to value is refused with a message naming the file and saying
 * want. */
static void refused(const char *key, const char *value, const char *want) {
  if (parse_with(key, value) == 0) {
    runtime_manifest_free(&m);
    fail_msg("%s = %.80s: taken, should be refused with \"%s\"", key, value, want);
  }
  if (strstr(err.msg, want) == NULL || strncmp(err.msg, "t.json: ", 8) != 0)
    fail_msg("%s = %.80s: \"%s\", should say \"%s\"", key, value, err.msg, want);
}

static void taken(const char *key, const char *value) {
  if (parse_with(key, value) < 0)
    fail_msg("%s = %.80s: refused: %s", key, value, err.msg);
  runtime_manifest_free(&m);
}

/* A JSON string of n copies of c, quoted. The caller frees. */
static char *quoted(size_t n, char c) {
  char *s = malloc(n + 3);
  assert_non_null(s);
  s[0] = '"';
  memset(s + 1, c, n);
  s[n + 1] = '"';
  s[n + 2] = '\0';
  return s;
}

/* A JSON array of n strings, prefix and the index. */
static char *array_of(size_t n, const char *prefix) {
  char *s = malloc(64 * (n + 1));
  assert_non_null(s);
  size_t used = (size_t)sprintf(s, "[");
  for (size_t i = 0; i < n; i++) {
    used += (size_t)sprintf(s + used, "%s", i ? ", " : "");
    used += (size_t)sprintf(s + used, "\"%s%zu\"", prefix, i);
  }
  sprintf(s + used, "]");
  return s;
}

static void base_is_taken_whole(void **state) {
  (void)state;
  char *text = manifest_with("env", "{\"LANG\": \"C.UTF-8\"}");
  assert_int_equal(parse_text(text), 0);
  free(text);
  assert_string_equal(m.name, "bash");
  assert_string_equal(m.language, "bash");
  assert_int_equal(m.n_aliases, 2);
  assert_string_equal(m.aliases[1], "shell");
  assert_int_equal(m.run.argc, 2);
  assert_string_equal(m.run.argv[0], "/usr/bin/bash");
  assert_null(m.run.argv[2]);
  assert_string_equal(m.file, "main.sh");
  assert_int_equal(m.n_env, 1);
  assert_string_equal(m.env[0], "LANG=C.UTF-8");
  assert_false(m.has_compile);
  assert_string_equal(m.self_test_stdout, "OK\n");
  runtime_manifest_free(&m);
}

static void the_whole_and_its_required_keys(void **state) {
  (void)state;
  assert_int_equal(parse_text("[]"), -1);
  assert_non_null(strstr(err.msg, "t.json: a manifest is a JSON object"));
  assert_int_equal(parse_text("{\"name\": "), -1);
  assert_non_null(strstr(err.msg, "t.json: line 1"));
  assert_int_equal(parse_text("{\"name\": \"a\", \"name\": \"b\"}"), -1);
  assert_non_null(strstr(err.msg, "duplicate"));
  /* A NUL in any string: the JSON parser refuses it before any key's check. */
  refused("run", "[\"/usr/bin/bash\", \"a\\u0000b\"]", "\\u0000 is not allowed");
  refused("nmae", "\"bash\"", "unknown key \"nmae\" in the manifest (known: name, language");
  const char *required[] = {"name", "language", "version", "file", "run", "self_test"};
  for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
    char want[64];
    snprintf(want, sizeof want, "%s is required", required[i]);
    refused(required[i], NULL, want);
  }
  /* The optional keys may be absent. */
  taken("aliases", NULL);
}

/* name, language, aliases[]: 1 to 32 of [a-z0-9.+_-], a letter or digit
 * first. */
static void names(void **state) {
  (void)state;
  const char *bad[] = {"\"\"",    "\"Bash\"", "\"-x\"", "\".x\"", "\"a b\"",
                       "\"a/b\"", "\"é\"",    "7",      "null",   "[\"bash\"]"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    refused("name", bad[i], "t.json: name must be a string of 1 to 32 characters");
    refused("language", bad[i], "t.json: language must be a string of 1 to 32 characters");
  }
  const char *good[] = {"\"c++\"", "\"9front\"", "\"python3.11\"", "\"a_b-c\""};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
    taken("name", good[i]);
  char *n32 = quoted(32, 'a'), *n33 = quoted(33, 'a');
  taken("name", n32);
  refused("name", n33, "name must be a string of 1 to 32");
  taken("language", n32);
  refused("language", n33, "language must be a string of 1 to 32");
  char alias[64];
  snprintf(alias, sizeof alias, "[%s]", n32);
  taken("aliases", alias);
  snprintf(alias, sizeof alias, "[%s]", n33);
  refused("aliases", alias, "aliases[] must be a string of 1 to 32");
  free(n32);
  free(n33);
  refused("aliases", "[\"sh\", \"Sh\"]", "aliases[] must be");
  refused("aliases", "\"sh\"", "aliases must be an array of at most 16 names");
  char *a16 = array_of(16, "a"), *a17 = array_of(17, "a");
  assert_int_equal(parse_with("aliases", a16), 0);
  assert_int_equal(m.n_aliases, 16);
  assert_string_equal(m.aliases[15], "a15");
  runtime_manifest_free(&m);
  refused("aliases", a17, "aliases must be an array of at most 16 names");
  free(a16);
  free(a17);
}

/* run, version.command, compile.command: 1 to 32 words, the first an
 * absolute normalised path, each printable and at most 512 bytes. */
static void commands(void **state) {
  (void)state;
  const char *bad_program[] = {"bash",
                               "./bash",
                               "/",
                               "/usr//bin/bash",
                               "/usr/bin/",
                               "/usr/./bin/bash",
                               "/usr/../bin/bash",
                               "/usr/bin/..",
                               "/usr/bin/."};
  for (size_t i = 0; i < sizeof bad_program / sizeof bad_program[0]; i++) {
    char value[128], want[128];
    snprintf(value, sizeof value, "[\"%s\", \"main.sh\"]", bad_program[i]);
    snprintf(want, sizeof want, "run[0] (\"%s\") must be an absolute, normalised path",
             bad_program[i]);
    refused("run", value, want);
  }
  taken("run", "[\"/usr/bin/bash\"]");
  taken("run", "[\"/usr/bin/.hidden/..x\"]"); /* dots inside a name are a name */
  refused("run", "\"/usr/bin/bash\"", "run must be an array of 1 to 32 strings");
  refused("run", "[]", "run must be an array of 1 to 32 strings");
  char *w32 = array_of(32, "/usr/bin/w"), *w33 = array_of(33, "/usr/bin/w");
  assert_int_equal(parse_with("run", w32), 0);
  assert_int_equal(m.run.argc, 32);
  assert_null(m.run.argv[32]);
  runtime_manifest_free(&m);
  refused("run", w33, "run must be an array of 1 to 32 strings");
  free(w32);
  free(w33);
  const char *bad_word[] = {"\"\"", "5", "null", "\"a\\nb\"", "\"\\u007f\"", "\"\\t\""};
  for (size_t i = 0; i < sizeof bad_word / sizeof bad_word[0]; i++) {
    char value[128];
    snprintf(value, sizeof value, "[\"/usr/bin/bash\", %s]", bad_word[i]);
    refused("run", value, "run[1] must be a non-empty printable string of at most 512 bytes");
  }
  char *s512 = quoted(512, 'x'), *s513 = quoted(513, 'x');
  char value[1200];
  snprintf(value, sizeof value, "[\"/usr/bin/bash\", %s]", s512);
  taken("run", value);
  snprintf(value, sizeof value, "[\"/usr/bin/bash\", %s]", s513);
  refused("run", value, "run[1] must be a non-empty printable string of at most 512 bytes");
  free(s512);
  free(s513);
  taken("run", "[\"/usr/bin/bash\", \"é ü\"]"); /* UTF-8 is printable */
}

static void version(void **state) {
  (void)state;
  refused("version", "\"5.2\"", "version must be an object {command, pattern}");
  refused("version", "{\"command\": [\"/usr/bin/bash\"], \"pattern\": \"(x)\", \"re\": 1}",
          "unknown key \"re\" in version (known: command, pattern)");
  refused("version", "{\"pattern\": \"(x)\"}", "version.command must be an array");
  refused("version", "{\"command\": [\"bash\"], \"pattern\": \"(x)\"}",
          "version.command[0] (\"bash\") must be an absolute");
  refused("version", "{\"command\": [\"/usr/bin/bash\"]}",
          "version.pattern must be a non-empty UTF-8 string of at most 256 bytes");
  refused("version", "{\"command\": [\"/usr/bin/bash\"], \"pattern\": \"\"}",
          "version.pattern must be a non-empty");
  refused("version", "{\"command\": [\"/usr/bin/bash\"], \"pattern\": \"(x\"}",
          "version.pattern is not a POSIX extended regular expression");
  refused("version", "{\"command\": [\"/usr/bin/bash\"], \"pattern\": \"x\"}",
          "version.pattern must have exactly one group, the version (it has 0)");
  refused("version", "{\"command\": [\"/usr/bin/bash\"], \"pattern\": \"(x)(y)\"}", "(it has 2)");
  char value[700];
  char *p = quoted(256, 'v'); /* "(v...v)": 256 bytes, the closing quote below */
  p[1] = '(';
  p[256] = ')';
  p[257] = '\0';
  snprintf(value, sizeof value, "{\"command\": [\"/usr/bin/bash\"], \"pattern\": %s\"}", p);
  taken("version", value);
  snprintf(value, sizeof value, "{\"command\": [\"/usr/bin/bash\"], \"pattern\": %sv\"}", p);
  refused("version", value, "version.pattern must be a non-empty UTF-8 string of at most 256");
  free(p);
}

/* file: a name in /workspace, not a path and not the service's own. */
static void file_name(void **state) {
  (void)state;
  const char *bad[] = {"\"\"",    "\".\"",      "\"..\"",     "\"a/b\"", "\"/main.sh\"",
                       "\"a b\"", "\"output\"", "\"mounts\"", "1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    refused("file", bad[i], "file must be a file name of 1 to 64 characters of [A-Za-z0-9._-]");
  char *f64 = quoted(64, 'f'), *f65 = quoted(65, 'f');
  taken("file", f64);
  refused("file", f65, "file must be a file name of 1 to 64");
  free(f64);
  free(f65);
  taken("file", "\"Main.java\"");
  taken("file", "\"..main\"");
}

static void self_test(void **state) {
  (void)state;
  refused("self_test", "\"echo\"", "self_test must be an object {code, stdout}");
  refused("self_test", "{\"code\": \"x\", \"stdout\": \"x\", \"exit\": 0}",
          "unknown key \"exit\" in self_test (known: code, stdout)");
  refused("self_test", "{\"stdout\": \"x\"}", "self_test.code must be a non-empty UTF-8 string");
  refused("self_test", "{\"code\": \"x\", \"stdout\": \"\"}",
          "self_test.stdout must be a non-empty");
  char *c4096 = quoted(4096, 'c'), *c4097 = quoted(4097, 'c');
  char value[8300];
  snprintf(value, sizeof value, "{\"code\": %s, \"stdout\": \"x\"}", c4096);
  taken("self_test", value);
  snprintf(value, sizeof value, "{\"code\": %s, \"stdout\": \"x\"}", c4097);
  refused("self_test", value, "self_test.code must be a non-empty UTF-8 string of at most 4096");
  snprintf(value, sizeof value, "{\"code\": \"x\", \"stdout\": %s}", c4097);
  refused("self_test", value, "self_test.stdout must be a non-empty UTF-8 string of at most 4096");
  free(c4096);
  free(c4097);
}

static void env(void **state) {
  (void)state;
  const char *bad[] = {"{\"1A\": \"x\"}", "{\"A-B\": \"x\"}",   "{\"\": \"x\"}",
                       "{\"A\": 1}",      "{\"A\": \"a\\nb\"}", "{\"Ä\": \"x\"}"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    refused("env", bad[i], "env: each key [A-Za-z_][A-Za-z0-9_]* with a printable string value");
  refused("env", "[\"A=1\"]", "env must be an object of at most 16 variables");
  taken("env", "{\"_a9\": \"\"}"); /* an empty value is a value */
  char *k128 = quoted(128, 'K'), *k129 = quoted(129, 'K');
  char value[1200];
  snprintf(value, sizeof value, "{%s: \"x\"}", k128);
  taken("env", value);
  snprintf(value, sizeof value, "{%s: \"x\"}", k129);
  refused("env", value, "env: each key");
  free(k128);
  free(k129);
  char *v512 = quoted(512, 'v'), *v513 = quoted(513, 'v');
  snprintf(value, sizeof value, "{\"V\": %s}", v512);
  taken("env", value);
  snprintf(value, sizeof value, "{\"V\": %s}", v513);
  refused("env", value,
          "env: each key [A-Za-z_][A-Za-z0-9_]* with a printable string value of "
          "at most 512 bytes");
  free(v512);
  free(v513);
  char vars[17 * 16 + 8];
  size_t used = (size_t)sprintf(vars, "{");
  for (int i = 0; i < 16; i++)
    used += (size_t)sprintf(vars + used, "%s\"V%d\": \"x\"", i ? ", " : "", i);
  sprintf(vars + used, "}");
  assert_int_equal(parse_with("env", vars), 0);
  assert_int_equal(m.n_env, 16);
  assert_string_equal(m.env[15], "V15=x");
  assert_null(m.env[16]);
  runtime_manifest_free(&m);
  sprintf(vars + used, ", \"V16\": \"x\"}");
  refused("env", vars, "env must be an object of at most 16 variables");
}

/* mounts: existing host directories below /opt, at most 4 (the engine
 * refuses a bind over /etc, /usr and the other system directories). */
static void mounts(void **state) {
  (void)state;
  char dirs[5][64];
  for (int i = 0; i < 5; i++) {
    snprintf(dirs[i], sizeof dirs[i], "/opt/sbx-unit-runtimes-%d-%d", (int)getpid(), i);
    assert_int_equal(mkdir(dirs[i], 0755) == 0 || errno == EEXIST, 1);
  }
  char file[96];
  snprintf(file, sizeof file, "%s/f", dirs[0]);
  FILE *f = fopen(file, "w");
  assert_non_null(f);
  fclose(f);
  const char *bad[] = {"\"/tmp\"",
                       "\"/usr/lib\"",
                       "\"/etc/alternatives\"",
                       "\"/opt\"",
                       "\"/opt/\"",
                       "\"/opt/../tmp\"",
                       "\"/opt//x\"",
                       "\"opt/x\"",
                       "\"/optx/lib\"",
                       "\"/home/x\"",
                       "\"/proc/self\"",
                       "\"/opt/./x\"",
                       "1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char value[160];
    snprintf(value, sizeof value, "[\"%s\", %s]", dirs[0], bad[i]);
    refused("mounts", value,
            "mounts[1] must be a normalised absolute path below /opt of at most 255 bytes");
  }
  char value[400];
  snprintf(value, sizeof value, "[\"/opt/no-such-dir-here-sbx\"]");
  refused("mounts", value, "mounts[0] (\"/opt/no-such-dir-here-sbx\"): No such file or directory");
  snprintf(value, sizeof value, "[\"%s\"]", file);
  refused("mounts", value, "not a directory");
  snprintf(value, sizeof value, "\"%s\"", dirs[0]);
  refused("mounts", value, "mounts must be an array of at most 4 paths");
  snprintf(value, sizeof value, "[\"%s\", \"%s\", \"%s\", \"%s\"]", dirs[0], dirs[1], dirs[2],
           dirs[3]);
  assert_int_equal(parse_with("mounts", value), 0);
  assert_int_equal(m.n_mounts, 4);
  assert_string_equal(m.mounts[1], dirs[1]);
  runtime_manifest_free(&m);
  snprintf(value, sizeof value, "[\"%s\", \"%s\", \"%s\", \"%s\", \"%s\"]", dirs[0], dirs[1],
           dirs[2], dirs[3], dirs[4]);
  refused("mounts", value, "mounts must be an array of at most 4 paths");
  unlink(file);
  for (int i = 0; i < 5; i++)
    rmdir(dirs[i]);
}

/* limits: RunCode's names, each from its minimum to 2^40, with why;
 * compile.limits the same without why. */
static void limits(void **state) {
  (void)state;
  assert_int_equal(
      parse_with("limits", "{\"memory_bytes\": 536870912, \"timeout_ms\": 1, \"why\": \"a JIT\"}"),
      0);
  assert_int_equal(m.limits[LIMIT_MEMORY_BYTES], 512 << 20);
  assert_int_equal(m.limits[LIMIT_TIMEOUT_MS], 1);
  assert_int_equal(m.limits[LIMIT_CPU_TIME_MS], 0);
  assert_string_equal(m.limits_why, "a JIT");
  runtime_manifest_free(&m);
  taken("limits", "{}");
  taken("limits", "{\"open_files\": 1099511627776, \"why\": \"x\"}"); /* 2^40 */
  refused("limits", "{\"open_files\": 1099511627777, \"why\": \"x\"}",
          "limits.open_files must be an integer from 16 to 1099511627776");
  refused("limits", "{\"open_files\": 15, \"why\": \"x\"}",
          "limits.open_files must be an integer from 16");
  taken("limits", "{\"memory_bytes\": 8388608, \"why\": \"x\"}");
  refused("limits", "{\"memory_bytes\": 8388607, \"why\": \"x\"}",
          "limits.memory_bytes must be an integer from 8388608");
  refused("limits", "{\"memory_bytes\": \"1G\", \"why\": \"x\"}", "limits.memory_bytes must be");
  refused("limits", "{\"memory_bytes\": 1e9, \"why\": \"x\"}", "limits.memory_bytes must be");
  refused("limits", "{\"timeout_ms\": 0, \"why\": \"x\"}",
          "limits.timeout_ms must be an integer from 1");
  refused("limits", "{\"memory\": 1, \"why\": \"x\"}",
          "limits: unknown limit \"memory\" (the names of RunCode's limits, and why)");
  refused("limits", "{\"memory_bytes\": 536870912}",
          "limits: a runtime that needs other limits says why (limits.why)");
  refused("limits", "{\"memory_bytes\": 536870912, \"why\": \"\"}",
          "t.json: limits.why must be a non-empty UTF-8 string of at most 1024 bytes");
  refused("limits", "{\"why\": 42}", "t.json: limits.why must be a non-empty UTF-8 string");
  refused("compile", "{\"command\": [\"/usr/bin/gcc\"], \"limits\": {\"why\": \"\"}}",
          "t.json: compile.limits.why must be a non-empty UTF-8 string of at most 1024 bytes");
  refused("limits", "[]", "limits must be an object");

  refused("compile", "[\"/usr/bin/gcc\"]", "compile must be an object {command, limits}");
  refused("compile", "{\"command\": [\"/usr/bin/gcc\"], \"flags\": []}",
          "unknown key \"flags\" in compile (known: command, limits)");
  refused("compile", "{\"limits\": {}}", "compile.command must be an array of 1 to 32 strings");
  refused("compile", "{\"command\": [\"gcc\"]}",
          "compile.command[0] (\"gcc\") must be an absolute");
  refused("compile", "{\"command\": [\"/usr/bin/gcc\"], \"limits\": {\"cc1\": 1, \"why\": \"x\"}}",
          "compile.limits: unknown limit \"cc1\" (the names of RunCode's limits, and why)");
  refused("compile",
          "{\"command\": [\"/usr/bin/gcc\"], \"limits\": {\"max_processes\": 0, \"why\": \"x\"}}",
          "compile.limits.max_processes must be an integer from 1");
  refused("compile", "{\"command\": [\"/usr/bin/gcc\"], \"limits\": {\"max_processes\": 64}}",
          "compile.limits: a runtime that needs other limits says why (compile.limits.why)");
  taken("compile", "{\"command\": [\"/usr/bin/gcc\"]}");
  taken("compile", "{\"command\": [\"/usr/bin/gcc\"], \"limits\": {}}");
  assert_int_equal(parse_with("compile", "{\"command\": [\"/usr/bin/gcc\", \"main.c\"], "
                                         "\"limits\": {\"max_processes\": 64, \"why\": \"cc1\"}}"),
                   0);
  assert_true(m.has_compile);
  assert_int_equal(m.compile.argc, 2);
  assert_int_equal(m.compile_limits[LIMIT_MAX_PROCESSES], 64);
  assert_string_equal(m.compile_limits_why, "cc1");
  assert_null(m.limits_why);
  runtime_manifest_free(&m);
}

static void description(void **state) {
  (void)state;
  taken("description", "\"GNU bash\"");
  refused("description", "[\"GNU bash\"]",
          "description must be a non-empty UTF-8 string of at "
          "most 1024 bytes");
  char *d1024 = quoted(1024, 'd'), *d1025 = quoted(1025, 'd');
  taken("description", d1024);
  refused("description", d1025, "description must be a non-empty UTF-8 string of at most 1024");
  free(d1024);
  free(d1025);
}

/* --- files and the directory --- */

static char dir[64];

static int make_dir(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/unit_runtimes.XXXXXX");
  assert_non_null(mkdtemp(dir));
  return 0;
}

static int remove_dir(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf -- '%s'", dir);
  assert_int_equal(system(cmd), 0);
  return 0;
}

static void write_file(const char *name, const char *text) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  assert_int_equal(fputs(text, f) >= 0, 1);
  assert_int_equal(fclose(f), 0);
}

/* A manifest named name with aliases (a JSON array) and language. */
static void write_manifest(const char *file, const char *name, const char *language,
                           const char *aliases) {
  char n[64], l[64];
  snprintf(n, sizeof n, "\"%s\"", name);
  snprintf(l, sizeof l, "\"%s\"", language);
  char *text = manifest_with("name", n);
  /* manifest_with changes one key; the language and aliases by hand. */
  char *lang = strstr(text, "\"language\": \"bash\"");
  assert_non_null(lang);
  char *out = malloc(strlen(text) + 256);
  assert_non_null(out);
  sprintf(out, "%.*s\"language\": %s, \"aliases\": %s%s", (int)(lang - text), text, l, aliases,
          strstr(text, ", \"version\""));
  write_file(file, out);
  free(out);
  free(text);
}

static int load(bool zygote) {
  static struct runtime_table t;
  memset(&err, 0, sizeof err);
  int rv = runtimes_load(&t, dir, true, zygote, &err);
  if (rv == 0)
    runtimes_free(&t);
  return rv;
}

static void file_loads(void **state) {
  (void)state;
  char path[256];
  write_manifest("ok.json", "bash", "bash", "[\"sh\"]");
  snprintf(path, sizeof path, "%s/ok.json", dir);
  memset(&err, 0, sizeof err);
  assert_int_equal(runtime_manifest_load(path, &m, &err), 0);
  assert_string_equal(m.aliases[0], "sh");
  runtime_manifest_free(&m);

  /* The whole file checked, its path in the message. */
  write_file("bad.json", "{\"name\": \"bash\"}");
  snprintf(path, sizeof path, "%s/bad.json", dir);
  assert_int_equal(runtime_manifest_load(path, &m, &err), -1);
  assert_non_null(strstr(err.msg, "/bad.json: language is required"));

  snprintf(path, sizeof path, "%s/absent.json", dir);
  assert_int_equal(runtime_manifest_load(path, &m, &err), -1);
  assert_non_null(strstr(err.msg, "/absent.json: No such file or directory"));

  /* Not a regular file: a symlink (even to a good manifest), a directory,
   * a FIFO (which would block the start). */
  char target[256];
  snprintf(target, sizeof target, "%s/ok.json", dir);
  snprintf(path, sizeof path, "%s/link.json", dir);
  assert_int_equal(symlink(target, path), 0);
  assert_int_equal(runtime_manifest_load(path, &m, &err), -1);
  assert_non_null(strstr(err.msg, "/link.json: not a regular file of at most 65536 bytes"));
  assert_int_equal(unlink(path), 0);
  snprintf(path, sizeof path, "%s/d.json", dir);
  assert_int_equal(mkdir(path, 0700), 0);
  assert_int_equal(runtime_manifest_load(path, &m, &err), -1);
  assert_non_null(strstr(err.msg, "/d.json: not a regular file"));
  assert_int_equal(rmdir(path), 0);
  snprintf(path, sizeof path, "%s/fifo.json", dir);
  assert_int_equal(mkfifo(path, 0600), 0);
  assert_int_equal(runtime_manifest_load(path, &m, &err), -1);
  assert_non_null(strstr(err.msg, "/fifo.json: not a regular file"));
  assert_int_equal(unlink(path), 0);

  /* 64 KiB taken (the manifest padded with spaces), one byte more refused. */
  char *text = manifest_with(NULL, NULL);
  size_t n = strlen(text);
  char *big = malloc(RUNTIME_MANIFEST_MAX + 2);
  assert_non_null(big);
  memcpy(big, text, n);
  memset(big + n, ' ', RUNTIME_MANIFEST_MAX - n);
  big[RUNTIME_MANIFEST_MAX] = '\0';
  write_file("big.json", big);
  snprintf(path, sizeof path, "%s/big.json", dir);
  assert_int_equal(runtime_manifest_load(path, &m, &err), 0);
  runtime_manifest_free(&m);
  big[RUNTIME_MANIFEST_MAX] = ' ';
  big[RUNTIME_MANIFEST_MAX + 1] = '\0';
  write_file("big.json", big);
  assert_int_equal(runtime_manifest_load(path, &m, &err), -1);
  assert_non_null(strstr(err.msg, "/big.json: not a regular file of at most 65536 bytes"));
  free(big);
  free(text);
}

static void directory_in_name_order(void **state) {
  (void)state;
  struct runtime_table t;
  write_manifest("b.json", "zsh", "zsh", "[]");
  write_manifest("a.json", "bash", "bash", "[\"sh\"]");
  write_file("notes.txt", "not a manifest");
  write_file(".hidden.json", "not a manifest either");
  write_file("x.json.bak", "nor this");
  assert_int_equal(runtimes_load(&t, dir, true, true, &err), 0);
  assert_int_equal(t.n, 4);
  assert_false(t.v[0].available); /* until its version is known */
  runtimes_set_python(&t, "3.11.2");
  assert_string_equal(t.v[0].name, "python");
  assert_string_equal(t.v[0].version, "3.11.2");
  assert_true(t.v[0].available);
  assert_string_equal(t.v[0].aliases[3], "python3.11");
  assert_string_equal(t.v[1].name, "python-zygote");
  assert_string_equal(t.v[2].name, "bash");
  assert_int_equal(t.v[2].kind, RUNTIME_KIND_MANIFEST);
  assert_false(t.v[2].available);
  assert_string_equal(t.v[2].why_unavailable, "not checked yet");
  assert_non_null(strstr(t.v[2].source, "/a.json"));
  assert_string_equal(t.v[2].aliases[0], "sh");
  assert_string_equal(t.v[3].name, "zsh");
  runtimes_free(&t);
  assert_int_equal(runtimes_load(&t, dir, true, false, &err), 0);
  assert_int_equal(t.n, 3);
  assert_string_equal(t.v[1].name, "bash");
  runtimes_free(&t);

  /* python3.MINOR is python's alias only when no manifest took it. */
  write_manifest("b.json", "x", "x", "[\"python3.11\"]");
  assert_int_equal(runtimes_load(&t, dir, true, false, &err), 0);
  runtimes_set_python(&t, "3.11.2");
  assert_int_equal(t.v[0].n_aliases, 3);
  runtimes_free(&t);
  /* One bad file fails the start, naming it. */
  write_file("c.json", "{}");
  assert_int_equal(load(true), -1);
  assert_non_null(strstr(err.msg, "/c.json: name is required"));
}

static void directory_absent_or_not_one(void **state) {
  (void)state;
  struct runtime_table t;
  assert_int_equal(runtimes_load(&t, "/nonexistent/runtimes", false, false, &err), 0);
  assert_int_equal(t.n, 1);
  runtimes_free(&t);
  assert_int_equal(runtimes_load(&t, NULL, true, false, &err), 0);
  assert_int_equal(t.n, 1);
  runtimes_free(&t);
  memset(&err, 0, sizeof err);
  assert_int_equal(runtimes_load(&t, "/nonexistent/runtimes", true, false, &err), -1);
  assert_string_equal(err.msg,
                      "runtimes directory /nonexistent/runtimes: No such file or directory");
  assert_int_equal(runtimes_load(&t, "/etc/passwd", false, false, &err), -1);
  assert_non_null(strstr(err.msg, "runtimes directory /etc/passwd"));
}

static void directory_refuses_what_is_not_a_file(void **state) {
  (void)state;
  char target[256], path[256];
  write_manifest("a.json", "bash", "bash", "[]");
  snprintf(target, sizeof target, "%s/a.json", dir);
  snprintf(path, sizeof path, "%s/b.json", dir);
  assert_int_equal(rename(target, path), 0);
  snprintf(path, sizeof path, "b.json");
  snprintf(target, sizeof target, "%s/a.json", dir);
  assert_int_equal(symlink(path, target), 0); /* a.json -> b.json */
  assert_int_equal(load(false), -1);
  assert_non_null(strstr(err.msg, "/a.json: not a regular file"));
  assert_int_equal(unlink(target), 0);
  assert_int_equal(mkdir(target, 0700), 0);
  assert_int_equal(load(false), -1);
  assert_non_null(strstr(err.msg, "/a.json: not a regular file"));
  assert_int_equal(rmdir(target), 0);
  assert_int_equal(load(false), 0);
}

/* A name or alias taken by another runtime fails the start naming both. */
static void directory_clashes(void **state) {
  (void)state;
  struct {
    const char *name, *language, *aliases, *want;
  } cases[] = {
      {"bash2", "bash2", "[\"sh\"]",
       "/b.json: runtime bash2: its name or an alias is taken by "
       "runtime bash of "},
      {"sh", "sh", "[]", "/b.json: runtime sh: its name or an alias is taken by runtime bash of "},
      {"bash", "bash", "[]",
       "/b.json: runtime bash: its name or an alias is taken by runtime bash"},
      {"x", "x", "[\"bash\"]", "/b.json: runtime x: its name or an alias is taken by runtime bash"},
      {"x", "x", "[\"shell\"]", "taken by runtime bash of "}, /* shell: bash's language */
      {"py", "py", "[]",
       "/b.json: runtime py: its name or an alias is taken by runtime python "
       "(built in)"},
      {"x", "x", "[\"py3\"]", "taken by runtime python (built in)"},
      {"python-zygote", "python", "[]", "taken by runtime python-zygote (built in)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_manifest("a.json", "bash", "shell", "[\"sh\"]");
    write_manifest("b.json", cases[i].name, cases[i].language, cases[i].aliases);
    if (load(true) == 0)
      fail_msg("case %zu (%s): loaded, should clash", i, cases[i].name);
    if (strstr(err.msg, cases[i].want) == NULL)
      fail_msg("case %zu: \"%s\", should say \"%s\"", i, err.msg, cases[i].want);
    if (strstr(cases[i].want, " of ") != NULL && strstr(err.msg, "/a.json") == NULL)
      fail_msg("case %zu: \"%s\" should name a.json", i, err.msg);
  }
  /* A language that is another runtime's name or alias: "language sh" or
   * "language bash" would then pick two runtimes by two rules. */
  struct {
    const char *language, *want;
  } languages[] = {
      {"sh", "/b.json: runtime x: its language sh is the name or an alias of runtime bash of "},
      {"bash", "/b.json: runtime x: its language bash is the name or an alias of runtime bash of "},
      {"py3", "/b.json: runtime x: its language py3 is the name or an alias of runtime python "
              "(built in)"},
      {"python-zygote", "its language python-zygote is the name or an alias of runtime "
                        "python-zygote (built in)"},
  };
  for (size_t i = 0; i < sizeof languages / sizeof languages[0]; i++) {
    write_manifest("a.json", "bash", "shell", "[\"sh\"]");
    write_manifest("b.json", "x", languages[i].language, "[]");
    if (load(true) == 0)
      fail_msg("language %s: loaded, should clash", languages[i].language);
    if (strstr(err.msg, languages[i].want) == NULL)
      fail_msg("language %s: \"%s\", should say \"%s\"", languages[i].language, err.msg,
               languages[i].want);
  }
  write_manifest("a.json", "bash", "shell", "[\"sh\"]");
  /* A language is shared: a second runtime may offer it (python's name is
   * its language). */
  write_manifest("b.json", "bash4", "shell", "[]");
  assert_int_equal(load(true), 0);
  write_manifest("b.json", "pypy", "python", "[\"pypy3\"]");
  assert_int_equal(load(true), 0);
}

static void directory_holds_at_most_64_runtimes(void **state) {
  (void)state;
  /* python and python-zygote, then 62 manifests: 64. */
  for (int i = 0; i < 62; i++) {
    char file[32], name[32];
    snprintf(file, sizeof file, "r%02d.json", i);
    snprintf(name, sizeof name, "r%02d", i);
    write_manifest(file, name, name, "[]");
  }
  assert_int_equal(load(true), 0);
  write_manifest("r62.json", "r62", "r62", "[]");
  assert_int_equal(load(true), -1);
  assert_non_null(strstr(err.msg, "/r62.json: more than 64 runtimes"));
}

/* --- the resolver --- */

static struct runtime_table table;

/* python (3.11.2), python-zygote, bash (5.2.15, available), node18 and
 * node20 (language javascript, aliases of their own; node20 available
 * only when node20_up). */
static void table_load(bool zygote, bool node20_up, const char *python_version) {
  write_manifest("a.json", "bash", "bash", "[\"sh\", \"shell\"]");
  write_manifest("b.json", "node18", "javascript", "[\"node\", \"js\"]");
  write_manifest("c.json", "node20", "javascript", "[]");
  memset(&err, 0, sizeof err);
  assert_int_equal(runtimes_load(&table, dir, true, zygote, &err), 0);
  runtimes_set_python(&table, python_version);
  const char *versions[][2] = {{"bash", "5.2.15"}, {"node18", "18.19.0"}, {"node20", "20.11.1"}};
  for (size_t i = 0; i < 3; i++) {
    struct runtime *rt = (struct runtime *)runtimes_find(&table, versions[i][0]);
    assert_non_null(rt);
    snprintf(rt->version, sizeof rt->version, "%s", versions[i][1]);
    rt->available = strcmp(rt->name, "node20") != 0 || node20_up;
    if (!rt->available)
      snprintf(rt->why_unavailable, sizeof rt->why_unavailable, "self-test printed \"\"");
  }
}

static const char *resolve(const char *runtime, const char *language, const char *version,
                           sbx_code want) {
  const struct runtime *rt = NULL;
  memset(&err, 0, sizeof err);
  int rv = runtimes_resolve(&table, runtime, language, version, &rt, &err);
  if (want == SBX_OK) {
    if (rv != 0)
      fail_msg("(%s, %s, %s): %s", runtime, language, version, err.msg);
    return rt->name;
  }
  if (rv == 0)
    fail_msg("(%s, %s, %s): got %s, should be refused", runtime, language, version, rt->name);
  assert_int_equal(err.code, want);
  return err.msg;
}

static void resolve_by_name(void **state) {
  (void)state;
  table_load(true, true, "3.11.2");
  assert_string_equal(resolve("", "", "", SBX_OK), "python");
  assert_string_equal(resolve("python", "", "", SBX_OK), "python");
  assert_string_equal(resolve("python-zygote", "", "", SBX_OK), "python-zygote");
  assert_string_equal(resolve("bash", "", "", SBX_OK), "bash");
  assert_string_equal(resolve("node20", "", "", SBX_OK), "node20");
  /* Aliases and languages are not names. */
  assert_string_equal(resolve("sh", "", "", SBX_INVALID_ARGUMENT),
                      "runtime: \"sh\" is not supported; supported: python, python-zygote, bash, "
                      "node18, node20");
  assert_non_null(strstr(resolve("javascript", "", "", SBX_INVALID_ARGUMENT), "not supported"));
  assert_non_null(strstr(resolve("Bash", "", "", SBX_INVALID_ARGUMENT), "\"Bash\" is not"));
  /* Both, or a version alone. */
  assert_non_null(strstr(resolve("bash", "bash", "", SBX_INVALID_ARGUMENT),
                         "runtime and language: set one of them"));
  assert_non_null(
      strstr(resolve("bash", "", "5", SBX_INVALID_ARGUMENT), "version: goes with language"));
  assert_non_null(
      strstr(resolve("", "", "5", SBX_INVALID_ARGUMENT), "version: goes with language"));
  runtimes_free(&table);

  /* Without --zygote python-zygote is not there, and the message says why. */
  table_load(false, false, "3.11.2");
  assert_string_equal(resolve("python-zygote", "", "", SBX_INVALID_ARGUMENT),
                      "runtime: \"python-zygote\" is not supported; supported: python, bash, "
                      "node18 (python-zygote needs a server started with --zygote)");
  /* An unavailable runtime exists: FAILED_PRECONDITION with its reason. */
  assert_string_equal(resolve("node20", "", "", SBX_FAILED_PRECONDITION),
                      "runtime node20 is unavailable on this server: self-test printed \"\" "
                      "(GetInfo's runtime_info)");
  runtimes_free(&table);

  /* A python that could not be asked its version: the default too. */
  table_load(true, true, "");
  assert_non_null(strstr(resolve("", "", "", SBX_FAILED_PRECONDITION),
                         "runtime python is unavailable on this server: /usr/bin/python3 could "
                         "not be asked for its version"));
  assert_non_null(strstr(resolve("python-zygote", "", "", SBX_FAILED_PRECONDITION),
                         "runtime python-zygote is unavailable"));
  assert_string_equal(resolve("bash", "", "", SBX_OK), "bash");
  runtimes_free(&table);
}

static void resolve_by_language_and_range(void **state) {
  (void)state;
  table_load(true, true, "3.11.2");
  assert_string_equal(resolve("", "python", "", SBX_OK), "python");
  assert_string_equal(resolve("", "py3", "3.x", SBX_OK), "python");
  assert_string_equal(resolve("", "python3.11", "*", SBX_OK), "python");
  assert_string_equal(resolve("", "bash", "5.2.15", SBX_OK), "bash");
  assert_string_equal(resolve("", "sh", ">=5", SBX_OK), "bash");
  /* One language, two versions: the first in range. */
  assert_string_equal(resolve("", "javascript", "", SBX_OK), "node18");
  assert_string_equal(resolve("", "javascript", "20", SBX_OK), "node20");
  assert_string_equal(resolve("", "javascript", "^18.0.0", SBX_OK), "node18");
  assert_string_equal(resolve("", "javascript", ">18", SBX_OK), "node20");
  assert_string_equal(resolve("", "node", "*", SBX_OK), "node18");  /* node18's alias */
  assert_string_equal(resolve("", "node20", "", SBX_OK), "node20"); /* a name is a language */
  assert_string_equal(resolve("", "js", "", SBX_OK), "node18");
  assert_string_equal(resolve("", "js", "20", SBX_INVALID_ARGUMENT),
                      "language: js-20 runtime is unknown; available: python, python-zygote, "
                      "bash, node18, node20 (GetInfo's runtime_info lists each with its "
                      "language, version and aliases)");
  assert_non_null(strstr(resolve("", "bash", "4.x", SBX_INVALID_ARGUMENT),
                         "language: bash-4.x runtime is unknown"));
  assert_non_null(
      strstr(resolve("", "ruby", "", SBX_INVALID_ARGUMENT), "language: ruby-* runtime is unknown"));
  assert_non_null(strstr(resolve("", "python", "2", SBX_INVALID_ARGUMENT),
                         "language: python-2 runtime is unknown"));
  /* python-zygote only by its name. */
  assert_non_null(strstr(resolve("", "python-zygote", "", SBX_INVALID_ARGUMENT),
                         "language: python-zygote-* runtime is unknown"));
  runtimes_free(&table);

  /* node20 down: a range only it could meet names it; another the up one. */
  table_load(true, false, "3.11.2");
  assert_string_equal(resolve("", "javascript", "18", SBX_OK), "node18");
  assert_string_equal(resolve("", "javascript", "20", SBX_FAILED_PRECONDITION),
                      "runtime node20 is unavailable on this server: self-test printed \"\" "
                      "(GetInfo's runtime_info)");
  runtimes_free(&table);

  /* python down: the language python is not served by python-zygote. */
  table_load(true, true, "");
  assert_non_null(
      strstr(resolve("", "python", "", SBX_FAILED_PRECONDITION), "runtime python is unavailable"));
  runtimes_free(&table);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(base_is_taken_whole),
      cmocka_unit_test(the_whole_and_its_required_keys),
      cmocka_unit_test(names),
      cmocka_unit_test(commands),
      cmocka_unit_test(version),
      cmocka_unit_test(file_name),
      cmocka_unit_test(self_test),
      cmocka_unit_test(env),
      cmocka_unit_test(mounts),
      cmocka_unit_test(limits),
      cmocka_unit_test(description),
      cmocka_unit_test_setup_teardown(file_loads, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(directory_in_name_order, make_dir, remove_dir),
      cmocka_unit_test(directory_absent_or_not_one),
      cmocka_unit_test_setup_teardown(directory_refuses_what_is_not_a_file, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(directory_clashes, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(directory_holds_at_most_64_runtimes, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(resolve_by_name, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(resolve_by_language_and_range, make_dir, remove_dir),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
