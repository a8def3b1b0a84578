/* Requirement strings are hostile: what passes, in which canonical form,
 * and what is refused; the store key; the missing-module hint. */
/* cmocka.h needs these first. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
// clang-format on
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "install.h"
#include "requirements.h"
#include "settings.h"

static struct sbx_error err;

static void accepted_in_canonical_form(void **state) {
  static const char *const cases[][2] = {
      {"numpy", "numpy"},
      {"NumPy", "numpy"},
      {"  zope.interface ", "zope-interface"},
      {"Foo__Bar-.baz", "foo-bar-baz"},
      {"numpy==1.26.*", "numpy==1.26.*"},
      {"requests >= 2.0 , <3", "requests<3,>=2.0"},
      {"requests (>=2.0,<3)", "requests<3,>=2.0"},
      {"pkg[Security , socks,security]~=1.4", "pkg[security,socks]~=1.4"},
      {"pkg[]", "pkg"},
      {"pkg===1.0+local.1", "pkg===1.0+local.1"},
      {"pkg!=1.0.post1", "pkg!=1.0.post1"},
      {"pkg; python_version>='3.8'", "pkg; python_version >= \"3.8\""},
      {"pkg ;sys_platform == \"linux\" and (python_version<'4' or os_name != "
       "'nt')",
       "pkg; sys_platform == \"linux\" and (python_version < \"4\" or os_name "
       "!= \"nt\")"},
      {"pkg; 'linux' in sys_platform", "pkg; \"linux\" in sys_platform"},
      {"pkg; extra not  in 'a b'", "pkg; extra not in \"a b\""},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char out[REQUIREMENT_MAX + 1];
    int rv = requirement_normalize(cases[i][0], false, out, sizeof(out), &err);
    if (rv != 0)
      fail_msg("%s refused: %s", cases[i][0], err.msg);
    assert_string_equal(out, cases[i][1]);
  }
}

static void refused(void **state) {
  static const char *const cases[][2] = {
      {"-e .", "must not start with '-'"},
      {"--index-url=http://x", "must not start with '-'"},
      {"  -rfile", "must not start with '-'"},
      {"pkg @ https://h/p.whl", "URLs"},
      {"git+https://h/r.git", "URLs"},
      {"pkg@1", "URLs"},
      {"./dir", "local paths"},
      {"../dir", "local paths"},
      {"/abs", "local paths"},
      {"~/x", "local paths"},
      {"dir/sub", "local paths"},
      {"c:\\x", "local paths"},
      {"pkg-1.0.tar.gz", "archive"},
      {"pkg-1.0-py3-none-any.whl", "archive"},
      {"pkg==1.0.zip", "archive"},
      {"", "a project name"},
      {"_pkg", "a project name"},
      {"pkg name", "end of the requirement"},
      {"pkg==1.0 --hash=sha256:0", "end of the requirement"},
      {"pkg==", "a version"},
      {"pkg=1", "end of the requirement"},
      {"pkg==-1", "must start with a letter or digit"},
      {"pkg[a", "',' or ']'"},
      {"pkg (>=1", "')'"},
      {"pkg; os.system('x')", "marker variable"},
      {"pkg; python_version >= '3.8", "unterminated"},
      {"pkg; python_version >= 'a\tb'", "printable ASCII"},
      {"pkg; python_version >= 'a\\b'", "local paths"},
      {"pkg; python_version", "marker operator"},
      {"pkg; python_version not '3'", "'in' after 'not'"},
      {"pkg; ((((((((((python_version>'1'))))))))))", "nested deeper"},
      {"pkg\n--index-url x", "end of the requirement"},
      {"pkg\xc3\xa9", "end of the requirement"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char out[REQUIREMENT_MAX + 1];
    if (requirement_normalize(cases[i][0], false, out, sizeof(out), &err) == 0)
      fail_msg("\"%s\" accepted as \"%s\"", cases[i][0], out);
    if (strstr(err.msg, cases[i][1]) == NULL)
      fail_msg("\"%s\": reason \"%s\" does not say \"%s\"", cases[i][0], err.msg, cases[i][1]);
  }
}

static void too_long_once_normalized(void **state) {
  char in[REQUIREMENT_MAX * 2], out[REQUIREMENT_MAX + 1];
  /* 20 extras of 60 characters each: within every part's cap, too long in all.
   */
  size_t n = (size_t)snprintf(in, sizeof(in), "pkg[");
  for (int i = 0; i < 16; i++)
    n += (size_t)snprintf(in + n, sizeof(in) - n, "%s%c%063d", i ? "," : "", 'a' + i, 0);
  snprintf(in + n, sizeof(in) - n, "]");
  assert_int_equal(requirement_normalize(in, false, out, sizeof(out), &err), -1);
  assert_non_null(strstr(err.msg, "longer than"));
}

static void set_and_key(void **state) {
  const char *a[] = {"Requests>=2", "numpy", "numpy"};
  const char *b[] = {"NUMPY", "requests >= 2"};
  const char *c[] = {"numpy", "requests>=3"};
  struct requirement_set sa, sb, sc;
  assert_int_equal(requirement_set_build(a, 3, false, &sa, &err), 2);
  assert_int_equal(requirement_set_build(b, 2, false, &sb, &err), 2);
  assert_int_equal(requirement_set_build(c, 2, false, &sc, &err), 2);
  assert_string_equal(sa.items[0], "numpy");
  assert_string_equal(sa.items[1], "requests>=2");
  char ka[REQUIREMENT_KEY_HEX + 1], kb[REQUIREMENT_KEY_HEX + 1], kc[REQUIREMENT_KEY_HEX + 1],
      kd[REQUIREMENT_KEY_HEX + 1];
  char *ma, *mb, *mc, *md;
  assert_int_equal(requirement_key(&sa, "python=3.11", ka, &ma), 0);
  assert_int_equal(requirement_key(&sb, "python=3.11", kb, &mb), 0);
  assert_int_equal(requirement_key(&sc, "python=3.11", kc, &mc), 0);
  assert_int_equal(requirement_key(&sa, "python=3.12", kd, &md), 0);
  assert_int_equal(strlen(ka), REQUIREMENT_KEY_HEX);
  assert_string_equal(ka, kb);     /* same set, other spelling and order */
  assert_string_not_equal(ka, kc); /* other specifier */
  assert_string_not_equal(ka, kd); /* other interpreter */
  assert_non_null(strstr(ma, "requirement=numpy\nrequirement=requests>=2\n"));
  const char *bad[] = {"numpy", "-e ."};
  struct requirement_set sbad;
  assert_int_equal(requirement_set_build(bad, 2, false, &sbad, &err), -1);
  assert_non_null(strstr(err.msg, "requirements[1]"));
  free(ma), free(mb), free(mc), free(md);
  requirement_set_free(&sa), requirement_set_free(&sb), requirement_set_free(&sc);
}

static void urls_when_allowed(void **state) {
  static const char *const ok[][2] = {
      {"Sbx_Url @ https://files.example/a/sbx_url-1.0-py3-none-any.whl",
       "sbx-url @ https://files.example/a/sbx_url-1.0-py3-none-any.whl"},
      {"pkg[B,a] @ HTTP://127.0.0.1:8000/pkg-2.0+local-py3-none-any.WHL",
       "pkg[a,b] @ http://127.0.0.1:8000/pkg-2.0+local-py3-none-any.WHL"},
      {"  pkg@http://h/p-1-py3-none-any.whl  ", "pkg @ http://h/p-1-py3-none-any.whl"},
  };
  for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
    char out[REQUIREMENT_MAX + 1];
    if (requirement_normalize(ok[i][0], true, out, sizeof(out), &err) != 0)
      fail_msg("%s refused: %s", ok[i][0], err.msg);
    assert_string_equal(out, ok[i][1]);
    const char *url = requirement_url(out);
    assert_non_null(url);
    assert_string_equal(url, strchr(ok[i][1], '@') + 2);
  }
  assert_null(requirement_url("numpy>=1"));
  char fetch[256], file[256], sha[65];
  assert_int_equal(requirement_url_parts("http://h/a/b/p-1-py3-none-any.whl", fetch, sizeof(fetch),
                                         file, sizeof(file), sha),
                   0);
  assert_string_equal(fetch, "http://h/a/b/p-1-py3-none-any.whl");
  assert_string_equal(file, "p-1-py3-none-any.whl");
  assert_string_equal(sha, "");
  static const char pinned[] = "https://h/p-1-py3-none-any.whl#sha256="
                               "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
  assert_int_equal(requirement_url_parts(pinned, fetch, sizeof(fetch), file, sizeof(file), sha), 0);
  assert_string_equal(fetch, "https://h/p-1-py3-none-any.whl");
  assert_string_equal(file, "p-1-py3-none-any.whl");
  assert_string_equal(sha, "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
  char canon[REQUIREMENT_MAX + 1];
  assert_int_equal(requirement_normalize("P @ https://h/p-1-py3-none-any.whl#sha256="
                                         "00112233445566778899AABBCCDDEEFF00112233445566778899"
                                         "aabbccddeeff",
                                         true, canon, sizeof(canon), &err),
                   0);
  assert_string_equal(canon, "p @ https://h/p-1-py3-none-any.whl#sha256="
                             "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
  static const char *const refused_urls[][2] = {
      {"pkg @ file:///etc/passwd", "http:// or https://"},
      {"pkg @ ftp://h/p-1-py3-none-any.whl", "http:// or https://"},
      {"pkg @ git+https://h/r.git", "http:// or https://"},
      {"pkg @ https://h/p-1.tar.gz", "wheel file"},
      {"pkg @ https://h/", "wheel file"},
      {"pkg @ https:///p-1-py3-none-any.whl", "host"},
      {"pkg @ https://h", "host and a path"},
      {"pkg @ https://h/p-1-py3-none-any.whl?x=1", "query"},
      {"pkg @ https://h/p-1-py3-none-any.whl#sha256=00", "only fragment"},
      {"pkg @ https://h/p-1-py3-none-any.whl#md5=00112233445566778899aabbccddeeff",
       "only fragment"},
      {"pkg @ https://h/p-1-py3-none-any.whl#sha256=zz112233445566778899aabbccddeeff00112233445566"
       "778899aabbccddeeff",
       "only fragment"},
      {"pkg @ https://h/p-1-py3-none-any.whl ; python_version > '3'", "nothing may follow"},
      {"pkg @ https://h/a\"b-1-py3-none-any.whl", "not accepted"},
      {"pkg @ https://h/%2e%2e-1-py3-none-any.whl", "only letters"},
      {"pkg @ https://h/.p-1-py3-none-any.whl", "wheel file"},
      {"pkg https://h/p-1-py3-none-any.whl", "'@'"},
      {"-e pkg @ https://h/p-1-py3-none-any.whl", "must not start with '-'"},
      {"pkg @ https://user@evil/p-1-py3-none-any.whl", "'@'"},
  };
  for (size_t i = 0; i < sizeof(refused_urls) / sizeof(refused_urls[0]); i++) {
    char out[REQUIREMENT_MAX + 1];
    if (requirement_normalize(refused_urls[i][0], true, out, sizeof(out), &err) == 0)
      fail_msg("\"%s\" accepted as \"%s\"", refused_urls[i][0], out);
    if (strstr(err.msg, refused_urls[i][1]) == NULL)
      fail_msg("\"%s\": reason \"%s\" does not say \"%s\"", refused_urls[i][0], err.msg,
               refused_urls[i][1]);
  }
  /* Not allowed: the reason names the setting. */
  char out[REQUIREMENT_MAX + 1];
  assert_int_equal(
      requirement_normalize("pkg @ https://h/p-1-py3-none-any.whl", false, out, sizeof(out), &err),
      -1);
  assert_non_null(strstr(err.msg, "--requirements-allow-urls"));
}

/* The one-line hint above pip's output tail names what failed and where
 * pip looked; the index shown never carries credentials. */
static void install_hints(void **state) {
  struct server_settings s;
  settings_defaults(&s);
  char hint[1024];
  install_failure_hint("ERROR: No matching distribution found for sbx-nope==9\n", &s, hint,
                       sizeof hint);
  assert_string_equal(hint, "could not install 'sbx-nope==9': no matching distribution in the "
                            "configured index (index https://pypi.org/simple)");
  snprintf(s.wheelhouse, sizeof s.wheelhouse, "/srv/wheels");
  s.offline = 1;
  install_failure_hint("Could not find a version that satisfies the requirement a>2 (from", &s,
                       hint, sizeof hint);
  assert_string_equal(hint, "could not install 'a>2': no matching distribution in the "
                            "configured index (wheelhouse /srv/wheels)");
  install_failure_hint("ERROR: ResolutionImpossible: ...", &s, hint, sizeof hint);
  assert_non_null(strstr(hint, "conflict with each other"));
  install_failure_hint("Traceback (most recent call last):", &s, hint, sizeof hint);
  assert_non_null(strstr(hint, "pip failed (its output follows)"));
  s.offline = 0;
  snprintf(s.index_url, sizeof s.index_url, "https://user:secret@pkgs.internal/simple");
  install_describe_index(&s, hint, sizeof hint);
  assert_string_equal(hint, "https://***@pkgs.internal/simple");
  install_failure_hint("No matching distribution found for x", &s, hint, sizeof hint);
  assert_null(strstr(hint, "secret"));
  s.offline = 1;
  install_describe_index(&s, hint, sizeof hint);
  assert_string_equal(hint, "");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(accepted_in_canonical_form), cmocka_unit_test(refused),
      cmocka_unit_test(too_long_once_normalized),   cmocka_unit_test(set_and_key),
      cmocka_unit_test(urls_when_allowed),          cmocka_unit_test(install_hints),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
