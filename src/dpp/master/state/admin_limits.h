/* What the master's admin endpoint accepts, in one place: the master
 * enforces these (admin.c, state.c), and `sluice submit` and `sluice jobs
 * resubmit` check a request against them before sending it, so that a user
 * learns which resume token is too large, and by how much, instead of
 * getting an HTTP 413. */
#ifndef SLUICE_DPP_MASTER_ADMIN_LIMITS_H
#define SLUICE_DPP_MASTER_ADMIN_LIMITS_H

/* The largest admin request body, in bytes. Bodies are job specs, scale
 * requests and resume tokens (base64, a few bytes per split): 8 MiB holds
 * a token of a job with ~1M splits. */
#define SL_MASTER_ADMIN_MAX_BODY (8u << 20)

/* The most resume tokens one submission or resubmission takes (one per
 * trainer rank). */
#define SL_MASTER_MAX_RESUME_TOKENS 65536

#endif
