/* Helpers shared by the fleet integration tests (tests/integration/
 * fleet_*_test.c): a scratch directory, generated tables, the real
 * `sluice master` process on fixed free ports (so a restarted master is
 * found at the same addresses), workers through the local executor or as
 * single processes with a chosen worker id, a tiny HTTP client for the
 * admin endpoint, trainer clients in master mode (threads here, or a
 * `sluice read` process whose printed batches are parsed) that record
 * every sample id they deliver per epoch, and a TCP relay between workers
 * and the master that can drop one frame of a given type.
 *
 * Sample ids delivered are counted per epoch: seen[epoch * rows + id].
 *
 * Everything is static: each test file includes this once. */
#ifndef SLUICE_TESTS_FLEET_UTIL_H
#define SLUICE_TESTS_FLEET_UTIL_H

#include "fleet_clients.h" /* trainer clients, readers, worker processes */
#include "fleet_core.h"    /* directory, tables, the master, HTTP, the executor */
#include "fleet_relay.h"   /* the relay that drops a frame */

#endif
