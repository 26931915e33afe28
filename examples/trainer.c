/* A complete trainer in C: receives every batch of a job from one DPP worker
 * through libsluice_trainer.so and counts what it got. README.md shows this
 * file; tests/script/c_install_test.sh builds it against an installed
 * prefix (pkg-config and find_package) and runs it against a real worker.
 *
 *   cc trainer.c $(pkg-config --cflags --libs sluice-trainer) -o trainer
 *   ./trainer 127.0.0.1:7077
 */
#include <inttypes.h>
#include <stdio.h>

#include <sluice/trainer.h>

int main(int argc, char **argv)
{
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.address = argc > 1 ? argv[1] : "127.0.0.1:7077";
    sl_trainer_t *t;
    sl_error_t err = {0};
    if (sl_trainer_connect(&o, &t, &err) != SL_OK) {
        fprintf(stderr, "trainer: %s\n", err.msg);
        return 1;
    }
    uint64_t batches = 0, samples = 0, unique_rows = 0;
    sl_batch_t *b;
    sl_err_t rc;
    while ((rc = sl_trainer_next(t, 10000, &b, &err)) == SL_OK) {
        /* b->sparse: KJT; b->groups[g]: IKJT (unique rows + inverse indices);
         * b->dense, b->labels: float32 [B, D]; b->sample_ids: int64 [B] */
        batches++;
        samples += b->batch_size;
        for (uint32_t g = 0; g < b->num_groups; g++)
            unique_rows += b->groups[g].unique.stride;
        sl_trainer_release(t, b);
    }
    sl_trainer_close(t);
    if (rc != SL_ERR_CLOSED) { /* SL_ERR_CLOSED: the job has no more data */
        fprintf(stderr, "trainer: %s\n", err.msg);
        return 1;
    }
    printf("trainer: %" PRIu64 " batches, %" PRIu64 " samples, %" PRIu64 " unique group rows\n",
           batches, samples, unique_rows);
    return 0;
}
