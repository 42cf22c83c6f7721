/* The simulator's per-delivery loops, compiled: the inner loop of
`simulator.fastpath.heard_run.heard_run` (`run`) and the items it takes (`items`).

Why C: at 1000 simulated peers the loop runs a million times a virtual round (10,000 peers:
100 million) and was half of the simulator's CPU at ~2.2 us a delivery, nearly all of it the
interpreter's own work (a dozen lookups, compares and the sha256 fetch draw through hashlib's
Python API). This is the same loop: the same checks in the same order on the same Python
objects, with the same results and side effects; `heard_run` falls back to its Python loop
when this module is not built, and tests/simulator/test_fastpath_rules.py holds both, decision by
decision, to the admission rules (`Inbox.heard` and `consider`) on random message streams.

run(items, start, me, banned, max_announce, opener_key, facts_of, number_dict, swarm_id,
    current, ahead, state_stage, numbered, announced_slots, known_slots, max_batch,
    fetches_full, connected_base, join_index, joined_count, valid, unknown_budget_full,
    probability, prefix, deferred, defer_type, store_parts, opener)
  -> (index, kind, value, deferred_count)

kind 0: every item from `start` was a deferral (index = len(items));
kind 1: items[index] takes the usual path (SLOW), nothing changed for it;
kind 2: items[index] is decided a fetch, value = (announcement, unknown);
kind 3: deciding items[index] raised, value = the exception.
deferred_count counts the deferrals of items before `index`.

`prefix` is the bytes hashed before each sender's suffix (`protocol.fetch_draw.FetchDraw.prefix`),
or None when probability >= 1.0 (no draw). `known_slots` is an array("i") (SenderRounds),
`announced_slots` a list (SenderMap). `store_parts` is `deferred.fast_offer_parts()` when
`deferred` is a DeferredStore (its offer is then done here), else None (`deferred.offer`).
`opener` is the inbox's Opener (`opener_key` is its id): for an item whose SharedOpen has no
entry for it yet, `opener.peek_opened(data)` decides whether the loop can decide it (and then
calls `shared.open(opener, max_announce)`, as `heard` would, once decided).

items(messages, item_by_message, make_item) -> list: `item_by_message.get(id(message)) or
make_item(message, item_by_message)` for each message (simulator.fastpath.delivery).
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <openssl/sha.h>
#include <stdint.h>
#include <string.h>

static PyObject *str_by_opener;
static PyObject *str_cutoff;
static PyObject *str_offer;
static PyObject *str_trim;
static PyObject *str_peek_opened;
static PyObject *str_open;

/* -1 error, 0 false, 1 true: `op(a, b)` as Python compares them, small ints without a call. */
static int
compare(PyObject *a, PyObject *b, int op)
{
    if (PyLong_CheckExact(a) && PyLong_CheckExact(b)) {
        int overflow_a = 0, overflow_b = 0;
        long long x = PyLong_AsLongLongAndOverflow(a, &overflow_a);
        long long y = PyLong_AsLongLongAndOverflow(b, &overflow_b);
        if (!overflow_a && !overflow_b) {
            switch (op) {
            case Py_LT: return x < y;
            case Py_LE: return x <= y;
            case Py_EQ: return x == y;
            case Py_NE: return x != y;
            case Py_GT: return x > y;
            case Py_GE: return x >= y;
            }
        }
    }
    return PyObject_RichCompareBool(a, b, op);
}

/* `mapping.get(key, default)` as a new reference (dicts without a call). */
static PyObject *
get_or(PyObject *mapping, PyObject *key, PyObject *fallback)
{
    if (PyDict_CheckExact(mapping)) {
        PyObject *value = PyDict_GetItemWithError(mapping, key);
        if (value == NULL) {
            if (PyErr_Occurred())
                return NULL;
            value = fallback;
        }
        Py_INCREF(value);
        return value;
    }
    return PyObject_CallMethod(mapping, "get", "OO", key, fallback);
}

/* `container[index]` as a new reference (lists without a call). */
static PyObject *
item_at(PyObject *container, Py_ssize_t index)
{
    if (PyList_CheckExact(container) && index >= 0 && index < PyList_GET_SIZE(container)) {
        PyObject *value = PyList_GET_ITEM(container, index);
        Py_INCREF(value);
        return value;
    }
    return PySequence_GetItem(container, index);
}

enum { KIND_END = 0, KIND_SLOW = 1, KIND_FETCH = 2, KIND_ERROR = 3 };

/* One test of heard_run's `or` chain: -1 (raised) is an error, true sends the item down the
   usual path (SLOW), false goes on to the next test. */
#define SLOW_IF(tested)               \
    do {                              \
        if ((test = (tested)) != 0) { \
            if (test < 0)             \
                goto error;           \
            goto slow;                \
        }                             \
    } while (0)

static PyObject *
heard_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 28) {
        PyErr_Format(PyExc_TypeError, "run() takes 28 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *items = args[0];
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    PyObject *me = args[2], *banned = args[3], *max_announce = args[4], *opener_key = args[5];
    PyObject *facts_of = args[6], *number_dict = args[7], *swarm_id = args[8];
    PyObject *current = args[9], *ahead = args[10], *state_stage = args[11];
    Py_ssize_t numbered = PyLong_AsSsize_t(args[12]);
    PyObject *announced_slots = args[13], *known_slots = args[14], *max_batch = args[15];
    int fetches_full = PyObject_IsTrue(args[16]);
    PyObject *connected_base = args[17], *join_index = args[18], *joined_count = args[19];
    PyObject *valid = args[20];
    int unknown_budget_full = PyObject_IsTrue(args[21]);
    double probability = PyFloat_AsDouble(args[22]);
    PyObject *prefix = args[23], *deferred = args[24], *defer_type = args[25];
    PyObject *store_parts = args[26], *opener = args[27];
    if (PyErr_Occurred())
        return NULL;
    if (!PyList_CheckExact(items) || !PyList_CheckExact(announced_slots)) {
        PyErr_SetString(PyExc_TypeError, "items and announced_slots must be lists");
        return NULL;
    }
    int current_int_overflow = 0;
    long current_long = PyLong_AsLongAndOverflow(current, &current_int_overflow);
    if (PyErr_Occurred())
        return NULL;
    if (current_int_overflow || current_long < INT32_MIN || current_long > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "the current round does not fit a SenderRounds slot");
        return NULL;
    }
    /* `len(data) > max_announce` without an int object per item, when it is a plain int. */
    int max_announce_small = 0;
    long long max_announce_value = 0;
    if (PyLong_CheckExact(max_announce)) {
        int overflow = 0;
        max_announce_value = PyLong_AsLongLongAndOverflow(max_announce, &overflow);
        if (max_announce_value == -1 && PyErr_Occurred())
            return NULL;
        max_announce_small = !overflow;
    }
    /* A DeferredStore's offer done here (DeferredStore.fast_offer_parts): append below the
       cutoff, trim at `trim_at`; any other store gets `offer` called. */
    PyObject *store_entries = NULL;
    Py_ssize_t trim_at = 0;
    if (store_parts != Py_None) {
        if (!PyTuple_CheckExact(store_parts) || PyTuple_GET_SIZE(store_parts) != 2
            || !PyList_CheckExact(PyTuple_GET_ITEM(store_parts, 0))) {
            PyErr_SetString(PyExc_TypeError, "store_parts must be (list, int) or None");
            return NULL;
        }
        store_entries = PyTuple_GET_ITEM(store_parts, 0);
        trim_at = PyLong_AsSsize_t(PyTuple_GET_ITEM(store_parts, 1));
        if (trim_at == -1 && PyErr_Occurred())
            return NULL;
    }
    int joined_nonzero = PyObject_IsTrue(joined_count);
    if (joined_nonzero < 0)
        return NULL;

    SHA256_CTX prefix_ctx;
    int draw = probability < 1.0;
    if (draw) {
        char *prefix_bytes;
        Py_ssize_t prefix_len;
        if (PyBytes_AsStringAndSize(prefix, &prefix_bytes, &prefix_len) < 0)
            return NULL;
        SHA256_Init(&prefix_ctx);
        SHA256_Update(&prefix_ctx, prefix_bytes, (size_t)prefix_len);
    }
    double cutoff = 0.0;
    int cutoff_known = 0;

    Py_buffer known;
    if (PyObject_GetBuffer(known_slots, &known, PyBUF_WRITABLE | PyBUF_FORMAT) < 0)
        return NULL;
    if (known.itemsize != sizeof(int32_t) || known.format == NULL || strcmp(known.format, "i") != 0) {
        PyBuffer_Release(&known);
        PyErr_SetString(PyExc_TypeError, "known_slots must be an array('i')");
        return NULL;
    }
    int32_t *known_ints = (int32_t *)known.buf;
    Py_ssize_t known_len = known.len / (Py_ssize_t)sizeof(int32_t);

    Py_ssize_t deferred_count = 0;
    Py_ssize_t index = start;
    int kind = KIND_END;
    PyObject *value = NULL;  /* kind 2's (announcement, unknown) */
    /* Per item, owned references released at `next`: */
    PyObject *by_opener = NULL, *entry = NULL, *facts = NULL, *number_obj = NULL;
    PyObject *joined_at = NULL, *valid_count = NULL;

    for (; index < PyList_GET_SIZE(items); index++) {
        PyObject *item = PyList_GET_ITEM(items, index);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 3) {
            PyErr_SetString(PyExc_TypeError, "an item must be a (sender, data, shared) tuple");
            goto error;
        }
        PyObject *sender = PyTuple_GET_ITEM(item, 0);
        PyObject *data = PyTuple_GET_ITEM(item, 1);
        PyObject *shared = PyTuple_GET_ITEM(item, 2);
        int test;
        if (shared == Py_None)
            goto slow;
        SLOW_IF(PyObject_RichCompareBool(sender, me, Py_EQ));
        SLOW_IF(PySequence_Contains(banned, sender));
        Py_ssize_t data_len = PyObject_Size(data);
        if (data_len < 0)
            goto error;
        if (max_announce_small) {
            if (data_len > max_announce_value)
                goto slow;
        }
        else {
            PyObject *data_len_obj = PyLong_FromSsize_t(data_len);
            if (data_len_obj == NULL)
                goto error;
            test = compare(data_len_obj, max_announce, Py_GT);
            Py_DECREF(data_len_obj);
            SLOW_IF(test);
        }
        by_opener = PyObject_GetAttr(shared, str_by_opener);
        if (by_opener == NULL)
            goto error;
        entry = get_or(by_opener, opener_key, Py_None);
        if (entry == NULL)
            goto error;
        int fresh = entry == Py_None;
        if (fresh) {
            /* The first receiver with this opener at this instant: decided here when the opener
               remembers the envelope (opened at an earlier instant), else the usual path opens it. */
            Py_CLEAR(entry);
            PyObject *peeked = PyObject_CallMethodOneArg(opener, str_peek_opened, data);
            if (peeked == NULL)
                goto error;
            if (peeked == Py_None) {
                Py_DECREF(peeked);
                goto slow;
            }
            facts = PyObject_CallFunctionObjArgs(facts_of, peeked, sender, NULL);
            Py_DECREF(peeked);
            if (facts == NULL)
                goto error;
        }
        else if ((facts = item_at(entry, 4)) == NULL) {
            goto error;
        }
        else if (facts == Py_None) {
            Py_DECREF(facts);
            PyObject *outcome = item_at(entry, 1);
            if (outcome == NULL)
                goto error;
            facts = PyObject_CallFunctionObjArgs(facts_of, outcome, sender, NULL);
            Py_DECREF(outcome);
            if (facts == NULL)
                goto error;
            if (PySequence_SetItem(entry, 4, facts) < 0)
                goto error;
        }
        if (facts == Py_False)
            goto slow;  /* an error outcome, another kind or a relayed message */
        if (!PyTuple_CheckExact(facts) || PyTuple_GET_SIZE(facts) != 7) {
            PyErr_SetString(PyExc_ValueError, "announcement facts must be a 7-tuple");
            goto error;
        }
        PyObject *announcement = PyTuple_GET_ITEM(facts, 0);
        PyObject *a_round = PyTuple_GET_ITEM(facts, 1);
        PyObject *a_stage = PyTuple_GET_ITEM(facts, 2);
        PyObject *a_swarm = PyTuple_GET_ITEM(facts, 3);
        PyObject *a_size = PyTuple_GET_ITEM(facts, 4);
        PyObject *a_digest = PyTuple_GET_ITEM(facts, 5);
        PyObject *suffix = PyTuple_GET_ITEM(facts, 6);
        number_obj = get_or(number_dict, sender, Py_None);
        if (number_obj == NULL)
            goto error;
        /* The same `or` chain as heard_run's, evaluated left to right. */
        SLOW_IF(PyObject_RichCompareBool(a_swarm, swarm_id, Py_NE));
        SLOW_IF(compare(a_round, current, Py_NE));
        SLOW_IF(compare(a_stage, ahead, Py_EQ));
        SLOW_IF(compare(a_stage, state_stage, Py_NE));
        if (number_obj == Py_None)
            goto slow;  /* not numbered yet: the usual path numbers it */
        Py_ssize_t number = PyLong_AsSsize_t(number_obj);
        if (number == -1 && PyErr_Occurred())
            goto error;
        if (number >= numbered)
            goto slow;  /* its slots are not there yet: the usual path grows the lists */
        if (number < 0 || number >= PyList_GET_SIZE(announced_slots) || number >= known_len) {
            PyErr_SetString(PyExc_IndexError, "a sender number outside its slots");
            goto error;
        }
        if (PyList_GET_ITEM(announced_slots, number) != Py_None)
            goto slow;  /* `sender in announced` */
        SLOW_IF(compare(a_size, max_batch, Py_GT));
        if (fetches_full)
            goto slow;
        /* unknown = not (sender in connected_base or (joined_count and
           join_index.get(sender, joined_count) < joined_count) or valid.get(sender, 0) > 0) */
        int established = PySequence_Contains(connected_base, sender);
        if (established < 0)
            goto error;
        if (!established && joined_nonzero) {
            joined_at = get_or(join_index, sender, joined_count);
            if (joined_at == NULL)
                goto error;
            established = compare(joined_at, joined_count, Py_LT);
            if (established < 0)
                goto error;
        }
        if (!established) {
            PyObject *zero = PyLong_FromLong(0);
            valid_count = get_or(valid, sender, zero);
            if (valid_count == NULL) {
                Py_DECREF(zero);
                goto error;
            }
            established = compare(valid_count, zero, Py_GT);
            Py_DECREF(zero);
            if (established < 0)
                goto error;
        }
        int unknown = !established;
        if (unknown && unknown_budget_full)
            goto slow;  /* the usual path refreshes `connected` first */
        /* Decided: from here on, what `heard` -> `consider` does. */
        if (fresh) {
            /* shared.open(opener, max_announce), as `heard` opens (a memo hit), then the facts */
            PyObject *opened = PyObject_CallMethodObjArgs(shared, str_open, opener, max_announce, NULL);
            if (opened == NULL)
                goto error;
            Py_DECREF(opened);
            entry = get_or(by_opener, opener_key, Py_None);
            if (entry == NULL)
                goto error;
            if (PySequence_SetItem(entry, 4, facts) < 0)
                goto error;
        }
        else {
            PyObject *repeats = item_at(entry, 3);
            if (repeats == NULL)
                goto error;
            PyObject *one = PyLong_FromLong(1);
            PyObject *more = PyNumber_Add(repeats, one);
            Py_DECREF(one);
            Py_DECREF(repeats);
            if (more == NULL)
                goto error;
            test = PySequence_SetItem(entry, 3, more);
            Py_DECREF(more);
            if (test < 0)
                goto error;
        }
        Py_INCREF(a_digest);
        PyList_SetItem(announced_slots, number, a_digest);  /* steals; releases the old None */
        known_ints[number] = (int32_t)current_long;
        if (draw) {
            char *suffix_bytes;
            Py_ssize_t suffix_len;
            if (PyBytes_AsStringAndSize(suffix, &suffix_bytes, &suffix_len) < 0)
                goto error;
            SHA256_CTX ctx = prefix_ctx;
            unsigned char digest[SHA256_DIGEST_LENGTH];
            SHA256_Update(&ctx, suffix_bytes, (size_t)suffix_len);
            SHA256_Final(digest, &ctx);
            uint64_t high = 0;
            for (int i = 0; i < 8; i++)
                high = (high << 8) | digest[i];
            /* (int.from_bytes(digest[:8], "big") >> 1) / 2**63: below 2**63, so exact as an
               int64 and rounded to nearest like Python's int true division by a power of 2. */
            double priority = (double)(int64_t)(high >> 1) / 9223372036854775808.0;
            if (priority >= probability) {
                if (!cutoff_known) {
                    PyObject *cutoff_obj = PyObject_GetAttr(deferred, str_cutoff);
                    if (cutoff_obj == NULL)
                        goto error;
                    cutoff = PyFloat_AsDouble(cutoff_obj);
                    Py_DECREF(cutoff_obj);
                    if (cutoff == -1.0 && PyErr_Occurred())
                        goto error;
                    cutoff_known = 1;
                }
                if (priority <= cutoff) {
                    PyObject *pair = Py_BuildValue("(dO)", priority, announcement);
                    if (pair == NULL)
                        goto error;
                    PyObject *new_args = PyTuple_Pack(1, pair);
                    Py_DECREF(pair);
                    if (new_args == NULL)
                        goto error;
                    PyObject *defer = PyTuple_Type.tp_new((PyTypeObject *)defer_type, new_args, NULL);
                    Py_DECREF(new_args);
                    if (defer == NULL)
                        goto error;
                    if (store_entries != NULL) {
                        /* DeferredStore.offer: the entry is below the cutoff (checked above) */
                        test = PyList_Append(store_entries, defer);
                        Py_DECREF(defer);
                        if (test < 0)
                            goto error;
                        if (PyList_GET_SIZE(store_entries) >= trim_at) {
                            PyObject *done = PyObject_CallMethodNoArgs(deferred, str_trim);
                            if (done == NULL)
                                goto error;
                            Py_DECREF(done);
                            cutoff_known = 0;  /* a trim lowers the cutoff */
                        }
                    }
                    else {
                        PyObject *done = PyObject_CallMethodOneArg(deferred, str_offer, defer);
                        Py_DECREF(defer);
                        if (done == NULL)
                            goto error;
                        Py_DECREF(done);
                        cutoff_known = 0;  /* an offer may trim, which lowers the cutoff */
                    }
                }
                deferred_count++;
                Py_CLEAR(by_opener);
                Py_CLEAR(entry);
                Py_CLEAR(facts);
                Py_CLEAR(number_obj);
                Py_CLEAR(joined_at);
                Py_CLEAR(valid_count);
                continue;
            }
        }
        value = Py_BuildValue("(OO)", announcement, unknown ? Py_True : Py_False);
        if (value == NULL)
            goto error;
        kind = KIND_FETCH;
        break;
    slow:
        kind = KIND_SLOW;
        break;
    }
    goto done;

error: {
        PyObject *type, *exc, *traceback;
        PyErr_Fetch(&type, &exc, &traceback);
        PyErr_NormalizeException(&type, &exc, &traceback);
        if (traceback != NULL && exc != NULL)
            PyException_SetTraceback(exc, traceback);
        Py_XDECREF(type);
        Py_XDECREF(traceback);
        value = exc;
        kind = KIND_ERROR;
    }
done:
    Py_XDECREF(by_opener);
    Py_XDECREF(entry);
    Py_XDECREF(facts);
    Py_XDECREF(number_obj);
    Py_XDECREF(joined_at);
    Py_XDECREF(valid_count);
    PyBuffer_Release(&known);
    if (value == NULL) {
        Py_INCREF(Py_None);
        value = Py_None;
    }
    PyObject *result = Py_BuildValue("(niNn)", index, kind, value, deferred_count);
    return result;
}

static PyObject *
items_of(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "items() takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *messages = args[0], *by_message = args[1], *make_item = args[2];
    if (!PyList_CheckExact(messages) || !PyDict_CheckExact(by_message)) {
        PyErr_SetString(PyExc_TypeError, "items() takes a list and a dict");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(messages);
    PyObject *result = PyList_New(count);
    if (result == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *message = PyList_GET_ITEM(messages, i);
        PyObject *key = PyLong_FromVoidPtr(message);  /* id(message) */
        if (key == NULL)
            goto error;
        PyObject *item = PyDict_GetItemWithError(by_message, key);
        Py_DECREF(key);
        if (item != NULL && PyObject_IsTrue(item) > 0) {
            Py_INCREF(item);
        }
        else {
            if (PyErr_Occurred())
                goto error;
            item = PyObject_CallFunctionObjArgs(make_item, message, by_message, NULL);
            if (item == NULL)
                goto error;
        }
        PyList_SET_ITEM(result, i, item);
    }
    return result;
error:
    Py_DECREF(result);
    return NULL;
}

static PyMethodDef methods[] = {
    {"items", (PyCFunction)(void (*)(void))items_of, METH_FASTCALL,
     "The (sender, data, shared) item of each message, made once per message."},
    {"run", (PyCFunction)(void (*)(void))heard_run, METH_FASTCALL,
     "The inner loop of simulator.fastpath.heard_run (see the module source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "simulator.fastpath._hot_loops",
    "The simulator's per-delivery loops, compiled (same checks, same order, same effects).", -1, methods,
};

PyMODINIT_FUNC
PyInit__hot_loops(void)
{
    str_by_opener = PyUnicode_InternFromString("by_opener");
    str_cutoff = PyUnicode_InternFromString("cutoff");
    str_offer = PyUnicode_InternFromString("offer");
    str_trim = PyUnicode_InternFromString("_trim");
    str_peek_opened = PyUnicode_InternFromString("peek_opened");
    str_open = PyUnicode_InternFromString("open");
    if (str_by_opener == NULL || str_cutoff == NULL || str_offer == NULL || str_trim == NULL || str_peek_opened == NULL || str_open == NULL)
        return NULL;
    return PyModule_Create(&module_def);
}
