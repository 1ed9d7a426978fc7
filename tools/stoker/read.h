/*
 * Between read.c, which parses the options of read and doctor and runs the
 * loader, and doctor.c, which reports what a doctor run found.
 */
#ifndef STOKER_READ_H
#define STOKER_READ_H

#include "cli.h"

extern const char doctor_help[];

/* Prints what doctor found after a run of `el` seconds that delivered
 * `bytes` of batch data, with a step of `step_ms` (0: none), and writes it
 * as a page to `html` (NULL: none; the loader's series then holds the run).
 * Returns 0 or EXIT_ERROR (the page could not be written). */
int doctor_report(const stk_loader_stats *st, double el, uint64_t bytes, double step_ms,
                  const char *html, stk_loader *ld, stk_dataset *ds);

/* When another order would read the dataset several times faster (a random
 * order over data read from the device sample by sample), says so, with the
 * measured rates. */
void order_hint(stk_dataset *ds, stk_loader *ld);

#endif
