/*
 * hybrid/methods.h — the method table: one row per way of predicting the weights. `--hybrid NAME` picks a
 * row by its name (`--hybrid 1`: the drift family with its flags as given; `--hybrid 0`: off). A method is
 * its header (its flags, state and hooks: hybrid/method.h says what a row holds) and one line below; the
 * facade (hybrid/hybrid.h), the trainers and llmc/ know no method by name.
 */
#ifndef HYBRID_METHODS_H
#define HYBRID_METHODS_H

#include "hybrid/method.h"
#include "hybrid/drift.h"
#include "hybrid/gpa.h"
#include "hybrid/linefit.h"

// the rows, in --help's order: X(name), the row `name##_method` of its header
#define HYBRID_METHOD_ROWS(X) \
    X(lookahead)              \
    X(predict)                \
    X(gpa)                    \
    X(linefit)

#define HYBRID_METHOD_POINTER(name) &name##_method,
#define HYBRID_METHOD_CHOICE(name) "|" #name
static const HybridMethod* const HYBRID_METHODS[] = {HYBRID_METHOD_ROWS(HYBRID_METHOD_POINTER)};
#define NUM_HYBRID_METHODS ((int)(sizeof(HYBRID_METHODS) / sizeof(HYBRID_METHODS[0])))
// --hybrid's values: 0 (off), 1 (on: the drift family, flags as given), then the rows' names
#define HYBRID_CHOICES "0|1" HYBRID_METHOD_ROWS(HYBRID_METHOD_CHOICE)

#endif // HYBRID_METHODS_H
