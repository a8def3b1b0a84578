/* feedback.c: see feedback.h. */
#include "feedback.h"

#include "text.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void feedback_add(struct feedback *fb, const char *fmt, ...) {
  if (fb->n >= FEEDBACK_MAX_LINES)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(fb->lines[fb->n++], FEEDBACK_LINE_MAX, fmt, ap);
  va_end(ap);
}

static void format_ms(uint64_t ms, char *buf, size_t len) {
  if (ms % 1000 == 0)
    snprintf(buf, len, "%llu s", (unsigned long long)(ms / 1000));
  else if (ms > 1000)
    snprintf(buf, len, "%.1f s", (double)ms / 1000.0);
  else
    snprintf(buf, len, "%llu ms", (unsigned long long)ms);
}

void feedback_build(const struct sandbox_result *r, const struct sandbox_limits *limits,
                    const char *field, const char *who, struct feedback *fb) {
  char a[32], b[32];
  fb->n = 0;
  switch (r->killed_by) {
  case SANDBOX_KILLED_BY_TIMEOUT:
    format_ms(limits->timeout_ms, a, sizeof(a));
    if (r->cpu_time_exceeded) {
      format_ms(limits->cpu_time_ms, b, sizeof(b));
      feedback_add(fb, "CPU time limit of %s reached; %s was killed (%s.cpu_time_ms)", b, who,
                   field);
    } else {
      feedback_add(fb, "timed out after %s; %s was killed (%s.timeout_ms)", a, who, field);
    }
    break;
  case SANDBOX_KILLED_BY_MEMORY:
    text_format_bytes(limits->memory_bytes, a, sizeof(a));
    feedback_add(fb, "memory limit of %s%s reached; %s was killed (%s.memory_bytes)", a,
                 r->memory_per_process ? " per process" : "", who, field);
    break;
  case SANDBOX_KILLED_BY_OUTPUT_LIMIT:
    text_format_bytes(limits->output_bytes, a, sizeof(a));
    feedback_add(fb, "output limit of %s per stream reached; %s was killed (%s.output_bytes)", a,
                 who, field);
    break;
  case SANDBOX_KILLED_BY_SIGNAL: {
    const char *name = sigabbrev_np(r->signal);
    feedback_add(fb, "killed by signal %d (SIG%s)", r->signal, name != NULL ? name : "?");
    break;
  }
  case SANDBOX_KILLED_BY_CANCELLED:
    feedback_add(fb, "cancelled (CancelRun); every process of the run was killed");
    break;
  case SANDBOX_KILLED_BY_NONE:
    if (r->signal != 0) {
      const char *name = sigabbrev_np(r->signal);
      feedback_add(fb, "terminated by signal %d (SIG%s)", r->signal, name != NULL ? name : "?");
    } else if (r->exit_code != 0) {
      feedback_add(fb, "exited with status %d; see stderr", r->exit_code);
    }
    break;
  }
  if (r->killed_by != SANDBOX_KILLED_BY_OUTPUT_LIMIT) {
    text_format_bytes(limits->output_bytes, a, sizeof(a));
    if (r->stdout_truncated)
      feedback_add(fb, "stdout truncated at %s (%s.output_bytes)", a, field);
    if (r->stderr_truncated)
      feedback_add(fb, "stderr truncated at %s (%s.output_bytes)", a, field);
  }
}

/* Import names whose distribution is called something else. */
static const struct {
  const char *module, *distribution;
} known_distributions[] = {
    {"yaml", "pyyaml"},          {"cv2", "opencv-python"},   {"sklearn", "scikit-learn"},
    {"PIL", "pillow"},           {"bs4", "beautifulsoup4"},  {"dateutil", "python-dateutil"},
    {"skimage", "scikit-image"}, {"Crypto", "pycryptodome"}, {"attr", "attrs"},
    {"dotenv", "python-dotenv"}, {"jwt", "pyjwt"},           {"magic", "python-magic"},
    {"serial", "pyserial"},      {"usb", "pyusb"},           {"docx", "python-docx"},
    {"pptx", "python-pptx"},     {"git", "gitpython"},       {"Levenshtein", "levenshtein"},
};

void feedback_missing_module(const uint8_t *data, size_t len, struct feedback *fb) {
  static const char needle[] = "ModuleNotFoundError: No module named '";
  const size_t nlen = sizeof(needle) - 1;
  const uint8_t *found = NULL;
  for (const uint8_t *p = data; data != NULL && p + nlen <= data + len;) {
    const uint8_t *hit = memmem(p, (size_t)(data + len - p), needle, nlen);
    if (hit == NULL)
      break;
    found = hit; /* the last one: the exception that ended the program */
    p = hit + nlen;
  }
  if (found == NULL)
    return;
  const uint8_t *name = found + nlen, *end = data + len;
  char module[64];
  size_t n = 0;
  /* A Python identifier, ASCII only; stop at the first '.' (top level). */
  while (name + n < end && n < sizeof(module) - 1 &&
         ((name[n] >= 'a' && name[n] <= 'z') || (name[n] >= 'A' && name[n] <= 'Z') ||
          (name[n] >= '0' && name[n] <= '9') || name[n] == '_'))
    n++;
  if (n == 0 || (name[0] >= '0' && name[0] <= '9') ||
      (name + n < end && name[n] != '\'' && name[n] != '.'))
    return;
  memcpy(module, name, n);
  module[n] = '\0';
  for (size_t i = 0; i < sizeof(known_distributions) / sizeof(known_distributions[0]); i++)
    if (strcmp(module, known_distributions[i].module) == 0) {
      feedback_add(fb, "add '%s' to requirements (it provides the module %s)",
                   known_distributions[i].distribution, module);
      return;
    }
  feedback_add(fb, "add '%s' to requirements", module);
}

void feedback_network_refused(const uint8_t *data, size_t len, struct feedback *fb) {
  static const char needle[] = "PermissionError: [Errno 13] Permission denied";
  static const char *const socket_frames[] = {"socket.py", "socket.socket(", "create_connection"};
  const size_t nlen = sizeof(needle) - 1, window = 1024;
  for (const uint8_t *p = data; data != NULL && p + nlen <= data + len;) {
    const uint8_t *hit = memmem(p, (size_t)(data + len - p), needle, nlen);
    if (hit == NULL)
      return;
    /* The traceback above the error names where it came from. */
    const uint8_t *from = (size_t)(hit - data) > window ? hit - window : data;
    for (size_t i = 0; i < sizeof(socket_frames) / sizeof(socket_frames[0]); i++)
      if (memmem(from, (size_t)(hit - from), socket_frames[i], strlen(socket_frames[i])) != NULL) {
        feedback_add(fb, "the program tried to use the network, which the sandbox refuses "
                         "(socket() fails with PermissionError); a thread that died of it may "
                         "leave the program waiting");
        return;
      }
    p = hit + nlen;
  }
}
