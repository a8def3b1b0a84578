/* engine_test_isolation.c: what a program in a sandbox sees and may do:
 * a read-only root with its own /dev, /tmp and /proc, an unprivileged uid
 * without capabilities, no secret of the host's (files, environment, file
 * descriptors), namespaces of its own and a seccomp filter. Each test is
 * an escape tried from inside; each must fail the way the test says. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_test_common.h"

static void test_dev_and_tmp_usable(void **state) {
  /* The devices, /tmp and /dev/shm work for the unprivileged program (the
   * template's nodes are 0666, the per-run tmpfs 1777), and what one run
   * mounts stays in its own copy of the template: a second run sees the
   * same mount table, not one more /tmp. */
  const char *code =
      "import os, stat, errno\n"
      "open('/dev/null', 'w').write('x'); print(len(open('/dev/zero', 'rb').read(8)))\n"
      "print(len(open('/dev/urandom', 'rb').read(8)))\n"
      "fd = os.open('/dev/full', os.O_WRONLY)\n"
      "try:\n    os.write(fd, b'x')\nexcept OSError as e:\n"
      "    print(e.errno == errno.ENOSPC)\n"
      "print(sorted(n for n in os.listdir('/dev')))\n"
      "print([oct(stat.S_IMODE(os.stat(p).st_mode)) for p in ('/dev/null', '/tmp', '/dev/shm')])\n"
      "open('/dev/shm/x', 'w').write('1'); open('/tmp/x', 'w').write('1')\n"
      "print(len(open('/proc/self/mountinfo').read().splitlines()))\n";
  struct run first, second;
  run_py(code, &first);
  run_py(code, &second);
  assert_int_equal(first.r.exit_code, 0);
  fprintf(stderr, "# %.*s", (int)first.r.stdout_len, first.r.stdout_data);
  const char *expect_prefix = "8\n8\nTrue\n['fd', 'full', 'null', 'ptmx', 'pts', 'random', "
                              "'shm', 'stderr', 'stdin', 'stdout', 'urandom', 'zero']\n['0o666', "
                              "'0o1777', '0o1777']\n";
  assert_true(first.r.stdout_len > strlen(expect_prefix));
  assert_memory_equal(first.r.stdout_data, expect_prefix, strlen(expect_prefix));
  assert_int_equal(first.r.stdout_len, second.r.stdout_len);
  assert_memory_equal(first.r.stdout_data, second.r.stdout_data, first.r.stdout_len);
  sandbox_result_free(&first.r);
  sandbox_result_free(&second.r);
}

static void test_root_is_read_only(void **state) {
  expect_py_stdout(
      "import errno\n"
      "for p in ['/x', '/usr/x', '/etc/x', '/bin/x', '/dev/x', '/proc/sys/kernel/hostname']:\n"
      "    try:\n"
      "        open(p, 'w'); print('wrote', p)\n"
      "    except OSError as e:\n"
      "        print(e.errno in (errno.EROFS, errno.EACCES, errno.EPERM))\n"
      "open('/workspace/ok', 'w').write('1'); open('/tmp/ok', 'w').write('1'); print('rw')\n",
      NULL, "True\nTrue\nTrue\nTrue\nTrue\nTrue\nrw\n");
}

static void test_unprivileged_uid_and_empty_caps(void **state) {
  char code[1024];
  snprintf(
      code, sizeof code,
      "import os\n"
      "print(os.getresuid() == (%u,)*3, os.getresgid() == (%u,)*3, os.getuid() != 0)\n"
      "print(os.getgroups())\n"
      "caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith('Cap')]\n"
      "print(set(caps))\n"
      "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('NoNewPrivs')])\n"
      /* EPERM; EINVAL in a zygote's user namespace, where uid 0 is not mapped. */
      "try:\n    os.setuid(0)\nexcept OSError:\n    print('setuid refused')\n",
      (unsigned)uid_base, (unsigned)uid_base);
  expect_py_stdout(code, NULL, "True True True\n[]\n{'0000000000000000'}\n['1']\nsetuid refused\n");
}

static void test_proc_shows_only_the_sandbox(void **state) {
  expect_py_stdout("import os\n"
                   "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
                   "print(pids, os.getpid())\n",
                   NULL, "[1, 2] 2\n");
}

static void test_no_host_secrets_in_etc(void **state) {
  struct run run;
  run_py(
      "import os\n"
      "print(os.path.exists('/etc/shadow'), os.path.exists('/root'), os.path.exists('/etc/ssh'))\n"
      "print(sorted(os.listdir('/etc')))\n",
      &run);
  assert_int_equal(run.rc, 0);
  assert_non_null(memmem(run.r.stdout_data, run.r.stdout_len, "False False False\n", 18));
  assert_null(memmem(run.r.stdout_data, run.r.stdout_len, "shadow", 6));
  sandbox_result_free(&run.r);
}

static void test_no_server_environment(void **state) {
  setenv("SANDBOXD_TEST_SECRET", "hunter2", 1);
  struct run run;
  run_py("import os; print(sorted(os.environ))", &run);
  assert_stdout(&run, "['HOME', 'LANG', 'MPLCONFIGDIR', 'PATH', 'TMPDIR', 'USER_VAR', "
                      "'XDG_CACHE_HOME']\n");
  unsetenv("SANDBOXD_TEST_SECRET");
  sandbox_result_free(&run.r);
}

static void test_only_stdio_fds_inherited(void **state) {
  int leak = open("/etc/hostname", O_RDONLY); /* not CLOEXEC on purpose */
  struct run run;
  run_py("import os; print(sorted(int(f) for f in os.listdir('/proc/self/fd')))", &run);
  close(leak);
  /* 3 is the directory listdir itself opened. */
  assert_stdout(&run, "[0, 1, 2, 3]\n");
  sandbox_result_free(&run.r);
}

static void test_new_namespaces_and_hostname(void **state) {
  static const char *const ns[] = {"pid", "mnt", "net", "ipc", "uts", "cgroup"};
  struct run run;
  run_py("import socket, os\n"
         "print(socket.gethostname())\n"
         "for ns in ['pid', 'mnt', 'net', 'ipc', 'uts', 'cgroup']:\n"
         "    print(os.readlink('/proc/self/ns/' + ns))\n",
         &run);
  assert_int_equal(run.rc, 0);
  /* Every namespace link inside must differ from the host's. */
  char *saveptr = NULL;
  char *copy = strndup((const char *)run.r.stdout_data, run.r.stdout_len);
  char *line = strtok_r(copy, "\n", &saveptr);
  assert_string_equal(line, "sandbox");
  for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
    line = strtok_r(NULL, "\n", &saveptr);
    assert_non_null(line);
    char path[64], host[128];
    snprintf(path, sizeof path, "/proc/self/ns/%s", ns[i]);
    ssize_t n = readlink(path, host, sizeof host - 1);
    host[n] = '\0';
    if (strcmp(line, host) == 0)
      fail_msg("namespace %s is the host's (%s)", ns[i], host);
  }
  free(copy);
  sandbox_result_free(&run.r);
}

static void test_seccomp_denies_dangerous_syscalls(void **state) {
  expect_py_stdout("import ctypes, os\n"
                   "libc = ctypes.CDLL(None, use_errno=True)\n"
                   "nr = {'ptrace': 101, 'mount': 165, 'unshare': 272, 'setns': 308, 'bpf': 321,\n"
                   "      'perf_event_open': 298, 'userfaultfd': 323, 'io_uring_setup': 425,\n"
                   "      'keyctl': 250, 'add_key': 248, 'kexec_load': 246, 'init_module': 175,\n"
                   "      'open_by_handle_at': 304, 'reboot': 169, 'settimeofday': 164,\n"
                   "      'process_vm_readv': 310, 'pivot_root': 155, 'acct': 163, 'swapon': 167}\n"
                   "bad = []\n"
                   "for name, n in nr.items():\n"
                   "    ctypes.set_errno(0)\n"
                   "    r = libc.syscall(n, 0, 0, 0, 0, 0)\n"
                   "    if r != -1 or ctypes.get_errno() not in (1, 13, 38):\n"
                   "        bad.append((name, r, ctypes.get_errno()))\n"
                   "# unshare(CLONE_NEWUSER) would give a fresh root inside: must fail\n"
                   "r = libc.unshare(0x10000000)\n"
                   "print(bad, r, ctypes.get_errno())\n"
                   "# x32 ABI: getpid with the x32 bit\n"
                   "print(libc.syscall(0x40000000 | 39) == -1)\n",
                   NULL, "[] -1 1\nTrue\n");
}

static void test_subprocess_and_threads_work(void **state) {
  expect_py_stdout(
      "import subprocess, threading, json\n"
      "out = subprocess.run(['/bin/echo', 'child'], capture_output=True).stdout.decode()\n"
      "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
      "print(out.strip(), json.dumps({'a': 1}))\n",
      NULL, "child {\"a\": 1}\n");
}

static void test_matplotlib_plots_without_setup(void **state) {
  /* What a data-analysis user does first: no environment variables, no
   * warnings on stderr, nothing but the plot left in the workspace. */
  if (access("/usr/lib/python3/dist-packages/matplotlib", F_OK) < 0) {
    /* The qemu VM's initramfs carries the standard library only. */
    fprintf(stderr, "# matplotlib is not installed here (scripts/install-deps installs it)\n");
    skip();
  }
  struct sandbox_limits l = {.timeout_ms = scaled_ms(20000)};
  struct run run;
  run_py_limits("import matplotlib\nmatplotlib.use('Agg')\n"
                "import matplotlib.pyplot as plt, os\n"
                "plt.plot([1, 2, 3]); plt.title('t'); plt.savefig('/workspace/p.png')\n"
                "print(sorted(os.listdir('/workspace')))\n",
                &l, NULL, 0, &run);
  if (run.r.stderr_len != 0)
    fprintf(stderr, "stderr: %.*s\n", (int)run.r.stderr_len, (const char *)run.r.stderr_data);
  /* In zygote mode the program is a script in the workspace. */
  assert_stdout(&run, zygote_mode ? "['" ZYGOTE_SCRIPT "', 'p.png']\n" : "['p.png']\n");
  assert_int_equal(run.r.stderr_len, 0);
  sandbox_result_free(&run.r);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup(test_root_is_read_only, test_setup),
    cmocka_unit_test_setup(test_dev_and_tmp_usable, test_setup),
    cmocka_unit_test_setup(test_unprivileged_uid_and_empty_caps, test_setup),
    cmocka_unit_test_setup(test_proc_shows_only_the_sandbox, test_setup),
    cmocka_unit_test_setup(test_no_host_secrets_in_etc, test_setup),
    cmocka_unit_test_setup(test_no_server_environment, test_setup),
    cmocka_unit_test_setup(test_only_stdio_fds_inherited, test_setup),
    cmocka_unit_test_setup(test_new_namespaces_and_hostname, test_setup),
    cmocka_unit_test_setup(test_seccomp_denies_dangerous_syscalls, test_setup),
    cmocka_unit_test_setup(test_subprocess_and_threads_work, test_setup),
    cmocka_unit_test_setup(test_matplotlib_plots_without_setup, test_setup),
};
const struct engine_tests engine_isolation_tests = ENGINE_TESTS(tests);
