/* dns_name.h: what a DNS name may look like wherever the egress proxy
 * meets one (an allow entry, a ClientHello's server name, a name it
 * resolves), in one place so the three can never disagree. A pure check
 * over bytes (they come from requests and sandboxes): letters, digits,
 * '-', '_'; labels of 1 to 63 bytes, neither starting nor ending with '-';
 * at most 253 bytes; no trailing dot (a caller that accepts one removes it
 * first). No backslash, so ns_name functions never see an escape. */
#ifndef SBX_DNS_NAME_H
#define SBX_DNS_NAME_H

#include <stddef.h>

#define DNS_NAME_TEXT_MAX 253
#define DNS_LABEL_TEXT_MAX 63

/* NULL for a good name, else why not ("an empty label (a dot at the start,
 * or two dots)", ...). */
const char *dns_name_problem(const char *s, size_t n);

#endif
