/* tls_files.c: see tls_files.h. Reads each file once, whole and capped,
 * and parses it with mbedTLS as nng will; never logs or keeps a key
 * anywhere but in the returned struct, which is wiped when freed. */
#include "tls_files.h"

#include <errno.h>
#include <fcntl.h>
#include <mbedtls/error.h>
#include <mbedtls/pk.h>
#include <mbedtls/x509_crt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"

/* The whole file as a NUL-terminated string (PEM is text), at most
 * TLS_FILE_MAX_BYTES. */
static int read_text(const char *setting, const char *path, char **out, struct sbx_error *err) {
  cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, errno, "%s %s", setting, path);
  if (!S_ISREG(st.st_mode) || st.st_size > (off_t)TLS_FILE_MAX_BYTES)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "%s %s: not a regular file of at most %u bytes", setting, path,
                         TLS_FILE_MAX_BYTES);
  char *buf = malloc((size_t)st.st_size + 1);
  if (buf == NULL)
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "%s %s", setting, path);
  size_t n = 0;
  while (n < (size_t)st.st_size) {
    ssize_t r = read(fd, buf + n, (size_t)st.st_size - n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      int e = r < 0 ? errno : EIO;
      free(buf);
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, e, "%s %s", setting, path);
    }
    n += (size_t)r;
  }
  buf[n] = '\0';
  *out = buf;
  return 0;
}

static void wipe_free(char *s) {
  if (s == NULL)
    return;
  explicit_bzero(s, strlen(s));
  free(s);
}

/* mbedTLS's words for ret, after ours. */
static int mbed_fail(struct sbx_error *err, int ret, const char *setting, const char *path,
                     const char *what) {
  char why[160];
  mbedtls_strerror(ret, why, sizeof(why));
  return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "%s %s: %s (mbedTLS: %s)", setting, path, what,
                       why);
}

static void format_time(const mbedtls_x509_time *t, char *buf, size_t len) {
  snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02dZ", t->year, t->mon, t->day, t->hour, t->min,
           t->sec);
}

/* The certificate parses, is valid now; its subject and end for the log. */
static int check_cert(const struct server_settings *s, struct tls_files *f, mbedtls_x509_crt *crt,
                      struct sbx_error *err) {
  int ret =
      mbedtls_x509_crt_parse(crt, (const unsigned char *)f->cert_pem, strlen(f->cert_pem) + 1);
  if (ret != 0)
    return mbed_fail(err, ret, "tls-cert", s->tls_cert, "not a PEM certificate nng can use");
  char when[32];
  if (mbedtls_x509_time_is_past(&crt->valid_to)) {
    format_time(&crt->valid_to, when, sizeof(when));
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "tls-cert %s: the certificate expired at %s; clients would refuse it",
                         s->tls_cert, when);
  }
  if (mbedtls_x509_time_is_future(&crt->valid_from)) {
    format_time(&crt->valid_from, when, sizeof(when));
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "tls-cert %s: the certificate is not valid before %s; clients would "
                         "refuse it",
                         s->tls_cert, when);
  }
  if (mbedtls_x509_dn_gets(f->subject, sizeof(f->subject), &crt->subject) < 0)
    snprintf(f->subject, sizeof(f->subject), "?");
  format_time(&crt->valid_to, f->not_after, sizeof(f->not_after));
  return 0;
}

/* The key parses (with the password, when there is one) and is the
 * certificate's. */
static int check_key(const struct server_settings *s, const struct tls_files *f,
                     const mbedtls_x509_crt *crt, struct sbx_error *err) {
  mbedtls_pk_context key;
  mbedtls_pk_init(&key);
  const char *pw = f->key_password;
  int ret = mbedtls_pk_parse_key(&key, (const unsigned char *)f->key_pem, strlen(f->key_pem) + 1,
                                 (const unsigned char *)pw, pw != NULL ? strlen(pw) : 0);
  int rv = 0;
  if (ret == MBEDTLS_ERR_PK_PASSWORD_REQUIRED)
    rv = sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                       "tls-key %s: the key is encrypted; give its password with "
                       "--tls-key-password-file FILE",
                       s->tls_key);
  else if (ret == MBEDTLS_ERR_PK_PASSWORD_MISMATCH)
    rv = sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                       "tls-key %s: the password in %s does not decrypt it", s->tls_key,
                       s->tls_key_password_file);
  else if (ret != 0)
    rv = mbed_fail(err, ret, "tls-key", s->tls_key, "not a PEM private key nng can use");
  else if (mbedtls_pk_check_pair(&crt->pk, &key) != 0)
    rv = sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                       "tls-key %s does not belong to the certificate in tls-cert %s", s->tls_key,
                       s->tls_cert);
  mbedtls_pk_free(&key);
  return rv;
}

static int check_ca(const struct server_settings *s, struct tls_files *f, struct sbx_error *err) {
  mbedtls_x509_crt ca;
  mbedtls_x509_crt_init(&ca);
  int ret = mbedtls_x509_crt_parse(&ca, (const unsigned char *)f->ca_pem, strlen(f->ca_pem) + 1);
  int rv = 0;
  if (ret != 0)
    rv = mbed_fail(err, ret, "tls-ca", s->tls_ca, "not a PEM bundle of certificates nng can use");
  for (const mbedtls_x509_crt *c = &ca; rv == 0 && c != NULL && c->raw.len > 0; c = c->next)
    f->ca_certs++;
  mbedtls_x509_crt_free(&ca);
  return rv;
}

/* The first line of the password file, without its line end. */
static int read_password(const struct server_settings *s, struct tls_files *f,
                         struct sbx_error *err) {
  if (read_text("tls-key-password-file", s->tls_key_password_file, &f->key_password, err) < 0)
    return -1;
  f->key_password[strcspn(f->key_password, "\r\n")] = '\0';
  return 0;
}

static int load(const struct server_settings *s, struct tls_files *f, struct sbx_error *err) {
  if (read_text("tls-cert", s->tls_cert, &f->cert_pem, err) < 0 ||
      read_text("tls-key", s->tls_key, &f->key_pem, err) < 0)
    return -1;
  if (s->tls_key_password_file[0] != '\0' && read_password(s, f, err) < 0)
    return -1;
  if (s->tls_ca[0] != '\0' &&
      (read_text("tls-ca", s->tls_ca, &f->ca_pem, err) < 0 || check_ca(s, f, err) < 0))
    return -1;
  mbedtls_x509_crt crt;
  mbedtls_x509_crt_init(&crt);
  int rv = check_cert(s, f, &crt, err) < 0 || check_key(s, f, &crt, err) < 0 ? -1 : 0;
  mbedtls_x509_crt_free(&crt);
  return rv;
}

int tls_files_load(const struct server_settings *s, struct tls_files *out, struct sbx_error *err) {
  memset(out, 0, sizeof(*out));
  out->client_auth = settings_tls_client_auth(s);
  if (load(s, out, err) < 0) {
    tls_files_free(out);
    return -1;
  }
  return 0;
}

void tls_files_free(struct tls_files *f) {
  free(f->cert_pem);
  wipe_free(f->key_pem);
  wipe_free(f->key_password);
  free(f->ca_pem);
  memset(f, 0, sizeof(*f));
}
