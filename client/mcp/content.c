/* content.c: the content blocks of a tool result (text, image, embedded
 * resource) and what deciding between them needs: base64 (OpenSSL), image
 * types by their bytes, UTF-8 checks, resource URIs. Data handed in came
 * out of a sandbox: text is made valid UTF-8 here, never trusted to be. */
#include <limits.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "mcp_internal.h"
#include "text.h"

json_t *mcp_text_block_bytes(const void *data, size_t len) {
  json_t *t = sbxc_json_text(data, len);
  return t != NULL ? json_pack("{s:s, s:o}", "type", "text", "text", t) : NULL;
}

json_t *mcp_text_block_take(char *text) {
  if (text == NULL)
    return NULL;
  json_t *block = mcp_text_block_bytes(text, strlen(text));
  free(text);
  return block;
}

json_t *mcp_text_block(const char *text) {
  return mcp_text_block_bytes(text, strlen(text));
}

char *mcp_base64(const uint8_t *data, size_t len) {
  if (len > (size_t)INT_MAX / 4 * 3 - 3)
    return NULL;
  char *out = malloc((len + 2) / 3 * 4 + 1);
  if (out == NULL)
    return NULL;
  EVP_EncodeBlock((unsigned char *)out, data, (int)len); /* NUL-terminates */
  return out;
}

int mcp_base64_decode(const char *in, size_t len, uint8_t **out, size_t *out_len) {
  *out = NULL;
  if (len > INT_MAX / 2)
    return -1;
  uint8_t *buf = malloc((len + 3) / 4 * 3 + 3);
  EVP_ENCODE_CTX *ctx = EVP_ENCODE_CTX_new();
  int n = 0, tail = 0;
  int ok = buf != NULL && ctx != NULL;
  if (ok) {
    EVP_DecodeInit(ctx);
    ok = EVP_DecodeUpdate(ctx, buf, &n, (const unsigned char *)in, (int)len) >= 0 &&
         EVP_DecodeFinal(ctx, buf + n, &tail) >= 0;
  }
  EVP_ENCODE_CTX_free(ctx);
  /* EVP_DecodeFinal accepts input that stops short of a 4-character group
   * silently: such input is not base64 with padding. */
  size_t chars = 0;
  for (size_t i = 0; ok && i < len; i++)
    chars += in[i] != '\n' && in[i] != '\r' && in[i] != ' ' && in[i] != '\t';
  if (!ok || chars % 4 != 0) {
    free(buf);
    return -1;
  }
  *out = buf;
  *out_len = (size_t)n + (size_t)tail;
  return 0;
}

json_t *mcp_image_block(const uint8_t *data, size_t len, const char *mime) {
  char *b64 = mcp_base64(data, len);
  if (b64 == NULL)
    return NULL;
  json_t *o = json_pack("{s:s, s:s, s:s}", "type", "image", "data", b64, "mimeType", mime);
  free(b64);
  return o;
}

json_t *mcp_resource_block(const char *uri, const char *mime, const uint8_t *data, size_t len,
                           bool as_text) {
  json_t *body = NULL;
  if (as_text) {
    body = sbxc_json_text(data, len);
  } else {
    char *b64 = mcp_base64(data, len);
    body = b64 != NULL ? json_string(b64) : NULL;
    free(b64);
  }
  if (body == NULL)
    return NULL;
  json_t *res = json_pack("{s:s, s:o, s:o}", "uri", uri, "mimeType", sbxc_json_cstring(mime),
                          as_text ? "text" : "blob", body);
  return res != NULL ? json_pack("{s:s, s:o}", "type", "resource", "resource", res) : NULL;
}

json_t *mcp_tool_result(json_t *content, bool is_error) {
  if (content == NULL)
    return NULL;
  return json_pack("{s:o, s:b}", "content", content, "isError", is_error);
}

json_t *mcp_tool_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *text = NULL;
  int n = vasprintf(&text, fmt, ap);
  va_end(ap);
  if (n < 0)
    return NULL;
  json_t *block = mcp_text_block_take(text);
  return block != NULL ? mcp_tool_result(json_pack("[o]", block), true) : NULL;
}

const char *mcp_image_type(const uint8_t *d, size_t n, const char *mime) {
  if (n >= 8 && memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0)
    return "image/png";
  if (n >= 3 && memcmp(d, "\xff\xd8\xff", 3) == 0)
    return "image/jpeg";
  if (n >= 6 && (memcmp(d, "GIF87a", 6) == 0 || memcmp(d, "GIF89a", 6) == 0))
    return "image/gif";
  if (n >= 12 && memcmp(d, "RIFF", 4) == 0 && memcmp(d + 8, "WEBP", 4) == 0)
    return "image/webp";
  if (mime != NULL && strcmp(mime, "image/svg+xml") == 0 && mcp_is_text(d, n) &&
      memmem(d, n, "<svg", 4) != NULL)
    return "image/svg+xml";
  return NULL;
}

bool mcp_svg_name(const char *path) {
  size_t n = strlen(path);
  return n >= 4 && strcasecmp(path + n - 4, ".svg") == 0;
}

bool mcp_is_text(const uint8_t *data, size_t len) {
  if (len == 0) /* data may be NULL then */
    return true;
  return memchr(data, '\0', len) == NULL && text_utf8_valid((const char *)data, len);
}

size_t mcp_utf8_cut(const uint8_t *d, size_t len) {
  for (size_t back = 1; back <= 3 && back <= len; back++) {
    uint8_t c = d[len - back];
    if ((c & 0xc0) == 0x80)
      continue; /* a continuation byte: look further back for the lead */
    size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

static void percent_encode(FILE *f, const char *s, bool keep_slash) {
  for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
    bool plain = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
                 *p == '-' || *p == '.' || *p == '_' || *p == '~' || (keep_slash && *p == '/');
    if (plain)
      fputc(*p, f);
    else
      fprintf(f, "%%%02X", *p);
  }
}

char *mcp_uri(const char *kind, const char *id, const char *path) {
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  if (f == NULL)
    return NULL;
  fprintf(f, "sandbox://%s/", kind);
  percent_encode(f, id, false);
  fputc('/', f);
  percent_encode(f, path, true);
  if (fclose(f) != 0) {
    free(out);
    return NULL;
  }
  return out;
}
