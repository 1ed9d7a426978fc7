/*
 * Between read.c, which parses the options of read and doctor and runs the
 * loader, and doctor.c, which reports what a doctor run found.
 */
#ifndef STOKER_READ_H
#define STOKER_READ_H

#include "cli.h"

extern const char doctor_help[];

/* Prints what doctor found after a run of `el` seconds that delivered
 * `bytes` of batch data, with a step of `step_ms` (0: none). */
void doctor_report(const stk_loader_stats *st, double el, uint64_t bytes, double step_ms,
                   stk_loader *ld, stk_dataset *ds);

/* When another order would read the dataset several times faster (a random
 * order over data read from the device sample by sample), says so, with the
 * measured rates. */
void order_hint(stk_dataset *ds, stk_loader *ld);

#endif
