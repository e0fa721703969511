/* tmakit._native: the per-call host paths in C, where the interpreter's own cost decides the host time.
 *
 * tmakit/_hotpath.py holds the Python twin of everything here (used when this module was not built) and
 * documents the contract; tests run both and compare. Nothing here includes cuda.h: driver entry points
 * come in as addresses from cuGetProcAddress (tmakit/_driver.py), so this builds with any C compiler.
 *
 *   RepeatLaunch        base type of tmakit.Kernel. Calling a kernel with the same arguments as its armed
 *                       launch (ints and bytes equal, other objects identical; same keywords) calls
 *                       cuLaunchKernelEx on the frozen parameter buffer (or the armed BoundLaunch, where
 *                       no entry point was given); anything else goes to Kernel._launch_slow(args, kwargs),
 *                       which checks, packs and may arm a new launch.
 *   lookup_request      describe_tensor's per-array request cache for torch-like tensors.
 *   DescribeFront       the public describe_tensor: describe_tensor(x, box) for a torch-like x with default
 *                       options answers from that cache without entering the Python function.
 *   repoint             cuTensorMapReplaceAddress on a stored descriptor, returning its 128 bytes.
 * The references they hold are released when re-armed or deallocated, and seen by the cycle collector.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <structmember.h>

typedef int (*LaunchKernelEx)(const void *config, void *func, void **params, void **extra);
typedef int (*TensorMapReplaceAddress)(void *tensor_map, void *address);

static PyObject *str_launch_slow, *str_repeat_failed, *str_alive, *str_data_ptr, *str_shape, *str_stride;

/* Equal for the repeat test: identical objects; or ints, bytes or tuples of such, of the same exact type, that
 * compare equal. Other objects (arrays, streams, TensorMaps) only by identity, so == never runs user code. */
static int same_value(PyObject *a, PyObject *b) {
  if (a == b) return 1;
  if (Py_TYPE(a) != Py_TYPE(b)) return 0;
  if (PyLong_CheckExact(a) || PyBytes_CheckExact(a)) return PyObject_RichCompareBool(a, b, Py_EQ);
  if (PyTuple_CheckExact(a)) {
    Py_ssize_t n = PyTuple_GET_SIZE(a);
    if (n != PyTuple_GET_SIZE(b)) return 0;
    for (Py_ssize_t i = 0; i < n; ++i) {
      int same = same_value(PyTuple_GET_ITEM(a, i), PyTuple_GET_ITEM(b, i));
      if (same != 1) return same;
    }
    return 1;
  }
  return 0;
}

static int same_kwargs(PyObject *given, PyObject *armed) {
  Py_ssize_t n = given ? PyDict_GET_SIZE(given) : 0;
  if (n != PyDict_GET_SIZE(armed)) return 0;
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (PyDict_Next(armed, &pos, &key, &value)) {
    PyObject *other = PyDict_GetItemWithError(given, key);
    if (other == NULL) return PyErr_Occurred() ? -1 : 0;
    int same = same_value(other, value);
    if (same != 1) return same;
  }
  return 1;
}

/* ---------------------------------------------------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD
  PyObject *args;    /* tuple of the armed launch, NULL when nothing is armed */
  PyObject *kwargs;  /* dict of its keywords (a copy) */
  PyObject *keep;    /* keeps the launch configuration and the frozen parameter buffer alive */
  PyObject *alive;   /* the module's finalizer: .alive is False once the module is unloaded */
  LaunchKernelEx launch;  /* cuLaunchKernelEx, or NULL: then calling `keep` (a BoundLaunch) launches */
  const void *config;
  void *func;
  void **params;
} RepeatLaunch;

static void repeat_clear_armed(RepeatLaunch *self) {
  Py_CLEAR(self->args);
  Py_CLEAR(self->kwargs);
  Py_CLEAR(self->keep);
  Py_CLEAR(self->alive);
  self->launch = NULL;
}

static int repeat_traverse(RepeatLaunch *self, visitproc visit, void *arg) {
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(self->args);
  Py_VISIT(self->kwargs);
  Py_VISIT(self->keep);
  Py_VISIT(self->alive);
  return 0;
}

static int repeat_clear(RepeatLaunch *self) {
  repeat_clear_armed(self);
  return 0;
}

static void repeat_dealloc(RepeatLaunch *self) {
  PyTypeObject *tp = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  repeat_clear_armed(self);
  tp->tp_free((PyObject *)self);
  Py_DECREF(tp);  /* instances of heap types own a reference to their type */
}

static PyObject *repeat_call(RepeatLaunch *self, PyObject *args, PyObject *kwargs) {
  if (self->args != NULL) {
    int same = same_value(args, self->args);
    if (same == 1) same = same_kwargs(kwargs, self->kwargs);
    if (same < 0) return NULL;
    if (same == 1) {
      PyObject *alive = PyObject_GetAttr(self->alive, str_alive);
      if (alive == NULL) return NULL;
      int loaded = PyObject_IsTrue(alive);
      Py_DECREF(alive);
      if (loaded < 0) return NULL;
      if (loaded && self->launch == NULL) return PyObject_CallNoArgs(self->keep);  /* no entry point: BoundLaunch */
      if (loaded) {
        PyObject *keep = self->keep;  /* held across the call: another thread may re-arm meanwhile */
        Py_INCREF(keep);
        LaunchKernelEx launch = self->launch;
        const void *config = self->config;
        void *func = self->func;
        void **params = self->params;
        int rc;
        Py_BEGIN_ALLOW_THREADS  /* a full launch queue blocks in the driver */
        rc = launch(config, func, params, NULL);
        Py_END_ALLOW_THREADS
        Py_DECREF(keep);
        if (rc == 0) Py_RETURN_NONE;
        PyObject *code = PyLong_FromLong(rc);
        if (code == NULL) return NULL;
        PyObject *result = PyObject_CallMethodObjArgs((PyObject *)self, str_repeat_failed, code, NULL);
        Py_DECREF(code);
        return result;
      }
    }
  }
  PyObject *given = kwargs ? kwargs : PyDict_New();
  if (given == NULL) return NULL;
  PyObject *result = PyObject_CallMethodObjArgs((PyObject *)self, str_launch_slow, args, given, NULL);
  if (kwargs == NULL) Py_DECREF(given);
  return result;
}

static PyObject *repeat_arm(RepeatLaunch *self, PyObject *a) {
  PyObject *args, *kwargs, *keep, *alive;
  unsigned long long launch, config, func, params;
  if (!PyArg_ParseTuple(a, "O!O!OOKKKK:_arm", &PyTuple_Type, &args, &PyDict_Type, &kwargs, &keep, &alive, &launch,
                        &config, &func, &params))
    return NULL;
  if (launch != 0 && (config == 0 || func == 0 || params == 0)) {
    PyErr_SetString(PyExc_ValueError, "_arm: a launch entry point needs a configuration, a function and parameters");
    return NULL;
  }
  PyObject *copy = PyDict_Copy(kwargs);
  if (copy == NULL) return NULL;
  repeat_clear_armed(self);
  Py_INCREF(args);
  Py_INCREF(keep);
  Py_INCREF(alive);
  self->args = args;
  self->kwargs = copy;
  self->keep = keep;
  self->alive = alive;
  self->launch = (LaunchKernelEx)(uintptr_t)launch;
  self->config = (const void *)(uintptr_t)config;
  self->func = (void *)(uintptr_t)func;
  self->params = (void **)(uintptr_t)params;
  Py_RETURN_NONE;
}

static PyObject *repeat_armed(RepeatLaunch *self, void *closure) {
  return Py_NewRef(self->args != NULL ? self->keep : Py_None);
}

static PyMethodDef repeat_methods[] = {
    {"_arm", (PyCFunction)repeat_arm, METH_VARARGS,
     "_arm(args, kwargs, keep, alive, launch, config, func, params): repeat this launch for identical calls"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef repeat_getset[] = {
    {"_armed", (getter)repeat_armed, NULL, "the object kept alive for the armed launch, or None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot repeat_slots[] = {
    {Py_tp_doc, "Base of tmakit.Kernel: repeats an armed launch from C, hands everything else to _launch_slow."},
    {Py_tp_call, repeat_call},
    {Py_tp_traverse, repeat_traverse},
    {Py_tp_clear, repeat_clear},
    {Py_tp_dealloc, repeat_dealloc},
    {Py_tp_methods, repeat_methods},
    {Py_tp_getset, repeat_getset},
    {Py_tp_new, PyType_GenericNew},
    {0, NULL},
};

static PyType_Spec repeat_spec = {
    "tmakit._native.RepeatLaunch", sizeof(RepeatLaunch), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, repeat_slots,
};

/* ---------------------------------------------------------------------------------------------------------- */

/* TensorMap's type and its slot descriptors, in the order of its fields (bind_tensor_map). */
#define TENSOR_MAP_FIELDS 7
static PyTypeObject *tensor_map_type;
static PyObject *tensor_map_slots[TENSOR_MAP_FIELDS];

static PyObject *bind_tensor_map(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyType_Check(args[0]) || !PyTuple_Check(args[1]) || PyTuple_GET_SIZE(args[1]) != TENSOR_MAP_FIELDS) {
    PyErr_SetString(PyExc_TypeError, "bind_tensor_map(TensorMap, (7 slot names in field order))");
    return NULL;
  }
  for (int i = 0; i < TENSOR_MAP_FIELDS; ++i) {
    PyObject *descr = PyObject_GetAttr(args[0], PyTuple_GET_ITEM(args[1], i));
    if (descr == NULL) return NULL;
    if (Py_TYPE(descr)->tp_descr_set == NULL) {
      Py_DECREF(descr);
      PyErr_Format(PyExc_TypeError, "TensorMap.%U is not a slot", PyTuple_GET_ITEM(args[1], i));
      return NULL;
    }
    Py_XSETREF(tensor_map_slots[i], descr);
  }
  Py_INCREF(args[0]);
  Py_XSETREF(tensor_map_type, (PyTypeObject *)args[0]);
  Py_RETURN_NONE;
}

/* A new TensorMap from five shared fields plus its owner and the owner's layout, without running __init__
 * (a generated dataclass __init__ is most of a cache hit's cost). */
static PyObject *new_tensor_map(PyObject *fields, PyObject *owner, PyObject *layout) {
  PyObject *tm = tensor_map_type->tp_alloc(tensor_map_type, 0);
  if (tm == NULL) return NULL;
  for (int i = 0; i < TENSOR_MAP_FIELDS; ++i) {
    PyObject *value = i < 5 ? PyTuple_GET_ITEM(fields, i) : (i == 5 ? owner : layout);
    PyObject *descr = tensor_map_slots[i];
    if (Py_TYPE(descr)->tp_descr_set(descr, tm, value) < 0) {
      Py_DECREF(tm);
      return NULL;
    }
  }
  return tm;
}

/* Whether `obj` is an exact tuple of exact ints. */
static int is_int_tuple(PyObject *obj) {
  if (!PyTuple_CheckExact(obj)) return 0;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(obj); ++i)
    if (!PyLong_CheckExact(PyTuple_GET_ITEM(obj, i))) return 0;
  return 1;
}

/* A tuple of exact ints (a list is converted), or NULL with no error set when the sequence is anything else. */
static PyObject *int_tuple(PyObject *seq) {
  PyObject *t;
  if (PyTuple_CheckExact(seq)) t = Py_NewRef(seq);
  else if (PyList_CheckExact(seq)) t = PyList_AsTuple(seq);
  else return NULL;
  if (t == NULL) { PyErr_Clear(); return NULL; }
  if (!is_int_tuple(t)) { Py_DECREF(t); return NULL; }
  return t;
}

/* Whether the weak reference `ref` still points at `obj`. */
static int referent_is(PyObject *ref, PyObject *obj) {
  if (!PyWeakref_Check(ref)) return 0;
#if PY_VERSION_HEX >= 0x030D0000
  PyObject *target = NULL;
  if (PyWeakref_GetRef(ref, &target) < 0) { PyErr_Clear(); return 0; }
  Py_XDECREF(target);  /* only compared, never used: obj itself is alive */
  return target == obj;
#else
  return PyWeakref_GetObject(ref) == obj;
#endif
}

/* The object a weak reference points at, as a new reference; NULL (no error) once it died. */
static PyObject *weak_target(PyObject *ref) {
#if PY_VERSION_HEX >= 0x030D0000
  PyObject *target = NULL;
  if (PyWeakref_GetRef(ref, &target) < 0) PyErr_Clear();
  return target;
#else
  PyObject *target = PyWeakref_GetObject(ref);
  return target != NULL && target != Py_None ? Py_NewRef(target) : (PyErr_Clear(), NULL);
#endif
}

/* Whether `entry` of the requests dict is well formed and belongs to the live `array`:
 * (weakref to the array, ptr, layout = (shape, stride), (spec, arch, device, descriptor, swizzle_reason)). */
static int is_entry_for(PyObject *entry, PyObject *array) {
  return PyTuple_CheckExact(entry) && PyTuple_GET_SIZE(entry) == 4 && PyTuple_CheckExact(PyTuple_GET_ITEM(entry, 2)) &&
         PyTuple_GET_SIZE(PyTuple_GET_ITEM(entry, 2)) == 2 && PyTuple_CheckExact(PyTuple_GET_ITEM(entry, 3)) &&
         PyTuple_GET_SIZE(PyTuple_GET_ITEM(entry, 3)) == 5 && referent_is(PyTuple_GET_ITEM(entry, 0), array);
}

/* The array's data_ptr(), shape and stride(), as new references; -1 with an error set (and all three NULL)
 * when one of them fails. They run the array's own code. */
static int read_layout(PyObject *array, PyObject **ptr, PyObject **shape, PyObject **stride) {
  *ptr = PyObject_CallMethodNoArgs(array, str_data_ptr);
  *shape = *ptr ? PyObject_GetAttr(array, str_shape) : NULL;
  *stride = *shape ? PyObject_CallMethodNoArgs(array, str_stride) : NULL;
  if (*stride != NULL) return 0;
  Py_CLEAR(*ptr);
  Py_CLEAR(*shape);
  return -1;
}

/* lookup_request(requests, array, box, swizzle, oob_fill, l2_promotion, interleave, element_strides, dtype,
 *                arch, encode) -> TensorMap (a hit) | (request, ptr, layout) (a miss) | None (not cacheable)
 * See tmakit/_hotpath.py:lookup_request for the contract. */
/* options: swizzle, oob_fill, l2_promotion, interleave, element_strides, dtype, arch, encode */
/* On a hit, *hit_entry (when given) receives a new reference to the entry that answered. */
static PyObject *lookup(PyObject *requests, PyObject *array, PyObject *box_given, PyObject *const *options,
                        PyObject **hit_entry) {
  if (tensor_map_type == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "lookup_request: bind_tensor_map was not called");
    return NULL;
  }
  for (int i = 0; i < 4; ++i) {  /* swizzle .. interleave: True == 1 and 64.0 == 64 must not share an entry */
    if (PyBool_Check(options[i]) || PyFloat_Check(options[i])) Py_RETURN_NONE;
  }
  PyObject *box = int_tuple(box_given);
  if (box == NULL) { if (PyErr_Occurred()) return NULL; Py_RETURN_NONE; }
  PyObject *es = options[4] == Py_None ? Py_NewRef(Py_None) : int_tuple(options[4]);
  if (es == NULL) { Py_DECREF(box); if (PyErr_Occurred()) return NULL; Py_RETURN_NONE; }
  PyObject *id = PyLong_FromVoidPtr(array);
  PyObject *request = id ? PyTuple_Pack(10, id, box, options[0], options[1], options[2], options[3], es, options[5],
                                        options[6], options[7])
                         : NULL;
  Py_XDECREF(id);
  Py_DECREF(box);
  Py_DECREF(es);
  if (request == NULL) return NULL;
  PyObject *entry = PyDict_GetItemWithError(requests, request);  /* borrowed */
  if (entry == NULL && PyErr_Occurred()) {
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) { Py_DECREF(request); return NULL; }
    PyErr_Clear();  /* an unhashable option: the general path reports it */
    Py_DECREF(request);
    Py_RETURN_NONE;
  }
  Py_XINCREF(entry);  /* reading the array's metadata runs its code, which could change the dict */
  PyObject *ptr, *shape, *stride;
  PyObject *layout = read_layout(array, &ptr, &shape, &stride) == 0 ? PyTuple_Pack(2, shape, stride) : NULL;
  Py_XDECREF(shape);
  Py_XDECREF(stride);
  PyObject *result = NULL;
  if (layout == NULL) goto done;
  if (entry != NULL && is_entry_for(entry, array)) {
    int same = PyObject_RichCompareBool(PyTuple_GET_ITEM(entry, 1), ptr, Py_EQ);
    if (same == 1) same = PyObject_RichCompareBool(PyTuple_GET_ITEM(entry, 2), layout, Py_EQ);
    if (same < 0) goto done;
    if (same == 1) {
      result = new_tensor_map(PyTuple_GET_ITEM(entry, 3), array, layout);
      if (result != NULL && hit_entry != NULL) *hit_entry = Py_NewRef(entry);
      goto done;
    }
  }
  result = PyTuple_Pack(3, request, ptr, layout);
done:
  Py_XDECREF(entry);
  Py_DECREF(request);
  Py_XDECREF(ptr);
  Py_XDECREF(layout);
  return result;
}

/* repoint(stored, address) -> bytes(128) | None. stored = (CUtensorMap object, its address, the address of
 * cuTensorMapReplaceAddress): re-point the stored descriptor at `address` and return its bytes; None when the
 * driver refuses (the caller then encodes afresh). */
static PyObject *repoint(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != 3) {
    PyErr_SetString(PyExc_TypeError, "repoint((tensor_map, its address, entry point), address)");
    return NULL;
  }
  void *tensor_map = PyLong_AsVoidPtr(PyTuple_GET_ITEM(args[0], 1));
  void *fn = tensor_map ? PyLong_AsVoidPtr(PyTuple_GET_ITEM(args[0], 2)) : NULL;
  void *address = fn ? PyLong_AsVoidPtr(args[1]) : NULL;
  if (PyErr_Occurred()) return NULL;
  if (fn == NULL || tensor_map == NULL) {
    PyErr_SetString(PyExc_ValueError, "repoint: null entry point or descriptor");
    return NULL;
  }
  if (((TensorMapReplaceAddress)fn)(tensor_map, address) != 0) Py_RETURN_NONE;
  return PyBytes_FromStringAndSize((const char *)tensor_map, 128);
}

static PyObject *lookup_request(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 11 || !PyDict_CheckExact(args[0])) {
    PyErr_SetString(PyExc_TypeError, "lookup_request takes (dict, array, box, 8 options)");
    return NULL;
  }
  return lookup(args[0], args[1], args[2], args + 3, NULL);
}

/* ---------------------------------------------------------------------------------------------------------- */

/* DescribeFront(impl, rest, torch_like, requests, defaults): the public describe_tensor. The call shapes
 * describe_tensor(x, box) and describe_tensor(x, box=box) for a known torch-like type run lookup() with the
 * default options and hand a miss to rest(array, box, defaults, found) (describe._torch_request); every other
 * call goes to impl, the Python describe_tensor. It carries a __dict__ so functools.update_wrapper can give
 * it impl's name, docstring and signature.
 *
 * In front of the requests dict sits a small table of recent plain requests, indexed by the array's address:
 * (entry of the dict, box as given, weakref to the TensorMap last returned). A hit there needs no key tuple,
 * hash or dict probe: the entry's weakref must still name this array, the box must be the same exact tuple of
 * ints, and the array's data_ptr(), shape and stride() must equal the entry's, exactly the test lookup() makes.
 * While the TensorMap returned last time is alive (tm = describe_tensor(x, box) in a loop holds it across the
 * next call), that same object is returned: it describes this very request, and tmakit never changes a
 * TensorMap it has returned. forget() empties
 * the table (describe.clear_requests). */
#define RECENT_SLOTS 8

typedef struct {
  PyObject *entry;  /* (weakref to the array, ptr, layout, fields), as stored in requests */
  PyObject *box;    /* the box as given: an exact tuple of exact ints */
  PyObject *last;   /* weakref to the TensorMap last returned for it, or NULL */
} Recent;

typedef struct {
  PyObject_HEAD
  PyObject *impl, *rest, *torch_like, *requests, *defaults, *dict;
  vectorcallfunc vectorcall;
  PyTypeObject *known_type;  /* last type found in torch_like (a set that only grows), borrowed: compared only */
  Recent recent[RECENT_SLOTS];
} DescribeFront;

static PyObject *str_box;

/* Every change of a slot sets its three fields together and releases the old values only afterwards:
 * allocating or releasing objects can run a garbage collection and with it any Python code, which may call
 * describe_tensor and refill this very slot. The slot's `last` always belongs to its `entry`. */
static void recent_set(Recent *slot, PyObject *entry, PyObject *box, PyObject *last) {  /* steals all three */
  PyObject *old_entry = slot->entry, *old_box = slot->box, *old_last = slot->last;
  slot->entry = entry;
  slot->box = box;
  slot->last = last;
  Py_XDECREF(old_entry);
  Py_XDECREF(old_box);
  Py_XDECREF(old_last);
}

static void recent_clear(Recent *slot) { recent_set(slot, NULL, NULL, NULL); }

/* A weak reference to the TensorMap `result`, or NULL (no error: remembering it is only an optimisation). */
static PyObject *weak_tensor_map(PyObject *result) {
  if (Py_TYPE(result) != tensor_map_type) return NULL;
  PyObject *ref = PyWeakref_NewRef(result, NULL);
  if (ref == NULL) PyErr_Clear();
  return ref;
}

static Recent *recent_slot(DescribeFront *self, PyObject *array) {
  return &self->recent[((uintptr_t)array >> 4) % RECENT_SLOTS];
}

/* The TensorMap for `array` from its recent slot; NULL with no error on a miss, NULL with an error set when
 * reading the array's metadata failed. */
static PyObject *recent_hit(DescribeFront *self, PyObject *array, PyObject *box) {
  Recent *slot = recent_slot(self, array);
  if (slot->entry == NULL || !referent_is(PyTuple_GET_ITEM(slot->entry, 0), array)) return NULL;
  if (slot->box != box && (!is_int_tuple(box) || same_value(box, slot->box) != 1)) return NULL;
  PyObject *entry = Py_NewRef(slot->entry);  /* the reads below run the array's code, which may refill the slot */
  PyObject *layout = PyTuple_GET_ITEM(entry, 2);
  PyObject *result = NULL;
  PyObject *ptr, *shape, *stride;
  int same = read_layout(array, &ptr, &shape, &stride);
  if (same == 0) same = PyObject_RichCompareBool(PyTuple_GET_ITEM(entry, 1), ptr, Py_EQ);
  if (same == 1) same = PyObject_RichCompareBool(PyTuple_GET_ITEM(layout, 0), shape, Py_EQ);
  if (same == 1) same = PyObject_RichCompareBool(PyTuple_GET_ITEM(layout, 1), stride, Py_EQ);
  if (same == 1) {
    slot = recent_slot(self, array);
    if (slot->entry == entry && slot->last != NULL) result = weak_target(slot->last);
    if (result == NULL) {
      result = new_tensor_map(PyTuple_GET_ITEM(entry, 3), array, layout);
      PyObject *last = result != NULL ? weak_tensor_map(result) : NULL;
      slot = recent_slot(self, array);  /* both allocations above may have run code that refilled the slot */
      if (last != NULL && slot->entry == entry) recent_set(slot, Py_NewRef(entry), Py_NewRef(slot->box), last);
      else Py_XDECREF(last);
    }
  }
  Py_XDECREF(ptr);
  Py_XDECREF(shape);
  Py_XDECREF(stride);
  Py_DECREF(entry);
  return result;
}

/* Point the array's slot at `entry` of the requests dict (a hit there, or what rest() just stored), with
 * `result` the TensorMap returned for it. */
static void recent_fill(DescribeFront *self, PyObject *array, PyObject *box, PyObject *entry, PyObject *result) {
  /* a list box still works through the dict, just not from here */
  if (!is_int_tuple(box) || !is_entry_for(entry, array)) return;
  Py_INCREF(entry);  /* borrowed from the dict, which the weakref's allocation below may change */
  Py_INCREF(box);
  recent_set(recent_slot(self, array), entry, box, weak_tensor_map(result));
}

static PyObject *front_vectorcall(DescribeFront *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  int plain = (nargs == 2 && nkw == 0) ||
              (nargs == 1 && nkw == 1 && (PyTuple_GET_ITEM(kwnames, 0) == str_box ||
                                          PyUnicode_Compare(PyTuple_GET_ITEM(kwnames, 0), str_box) == 0));
  if (plain && Py_TYPE(args[0]) != self->known_type) {
    int known = PySet_Contains(self->torch_like, (PyObject *)Py_TYPE(args[0]));
    if (known < 0) return NULL;
    if (known) self->known_type = Py_TYPE(args[0]);
    plain = known;
  }
  if (!plain) return PyObject_Vectorcall(self->impl, args, nargsf, kwnames);
  PyObject *array = args[0], *box = args[1];
  PyObject *result = recent_hit(self, array, box);
  if (result != NULL || PyErr_Occurred()) return result;
  PyObject *entry = NULL;
  PyObject *found = lookup(self->requests, array, box, ((PyTupleObject *)self->defaults)->ob_item, &entry);
  if (found == NULL) return NULL;
  if (found != Py_None && !PyTuple_CheckExact(found)) {  /* a hit in the dict */
    recent_fill(self, array, box, entry, found);
    Py_DECREF(entry);
    return found;
  }
  result = PyObject_CallFunctionObjArgs(self->rest, array, box, self->defaults, found, NULL);
  if (result != NULL && found != Py_None) {  /* a miss that rest() has built and stored */
    entry = PyDict_GetItemWithError(self->requests, PyTuple_GET_ITEM(found, 0));  /* borrowed */
    if (entry != NULL) recent_fill(self, array, box, entry, result);
    else if (PyErr_Occurred()) Py_CLEAR(result);
  }
  Py_DECREF(found);
  return result;
}

static void recent_forget(DescribeFront *self) {
  for (int i = 0; i < RECENT_SLOTS; ++i) recent_clear(&self->recent[i]);
}

static PyObject *front_forget(DescribeFront *self, PyObject *unused) {
  recent_forget(self);
  Py_RETURN_NONE;
}

static PyObject *front_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  PyObject *impl, *rest, *torch_like, *requests, *defaults;
  if (!PyArg_ParseTuple(args, "OOO!O!O!:DescribeFront", &impl, &rest, &PySet_Type, &torch_like, &PyDict_Type,
                        &requests, &PyTuple_Type, &defaults))
    return NULL;
  if (PyTuple_GET_SIZE(defaults) != 8) {
    PyErr_SetString(PyExc_TypeError, "DescribeFront: defaults must hold the 8 default options");
    return NULL;
  }
  DescribeFront *self = (DescribeFront *)type->tp_alloc(type, 0);
  if (self == NULL) return NULL;
  self->impl = Py_NewRef(impl);
  self->rest = Py_NewRef(rest);
  self->torch_like = Py_NewRef(torch_like);
  self->requests = Py_NewRef(requests);
  self->defaults = Py_NewRef(defaults);
  self->vectorcall = (vectorcallfunc)front_vectorcall;
  return (PyObject *)self;
}

static int front_traverse(DescribeFront *self, visitproc visit, void *arg) {
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(self->impl);
  Py_VISIT(self->rest);
  Py_VISIT(self->torch_like);
  Py_VISIT(self->requests);
  Py_VISIT(self->defaults);
  Py_VISIT(self->dict);
  for (int i = 0; i < RECENT_SLOTS; ++i) {
    Py_VISIT(self->recent[i].entry);
    Py_VISIT(self->recent[i].box);
    Py_VISIT(self->recent[i].last);
  }
  return 0;
}

static int front_clear(DescribeFront *self) {
  Py_CLEAR(self->impl);
  Py_CLEAR(self->rest);
  Py_CLEAR(self->torch_like);
  Py_CLEAR(self->requests);
  Py_CLEAR(self->defaults);
  Py_CLEAR(self->dict);
  recent_forget(self);
  return 0;
}

static void front_dealloc(DescribeFront *self) {
  PyTypeObject *tp = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  front_clear(self);
  tp->tp_free((PyObject *)self);
  Py_DECREF(tp);
}

static PyObject *front_call(PyObject *self, PyObject *args, PyObject *kwargs) {
  return PyVectorcall_Call(self, args, kwargs);
}

static PyMemberDef front_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(DescribeFront, vectorcall), READONLY, NULL},
    {"__dictoffset__", T_PYSSIZET, offsetof(DescribeFront, dict), READONLY, NULL},
    {"__wrapped_impl__", T_OBJECT, offsetof(DescribeFront, impl), READONLY, "the Python function behind it"},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef front_methods[] = {
    {"forget", (PyCFunction)front_forget, METH_NOARGS, "empty the table of recent requests"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef front_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot front_slots[] = {
    {Py_tp_getset, front_getset},
    {Py_tp_methods, front_methods},
    {Py_tp_doc, "The C front of describe_tensor (see tmakit/_native.c)."},
    {Py_tp_new, front_new},
    {Py_tp_call, front_call},
    {Py_tp_traverse, front_traverse},
    {Py_tp_clear, front_clear},
    {Py_tp_dealloc, front_dealloc},
    {Py_tp_members, front_members},
    {0, NULL},
};

static PyType_Spec front_spec = {
    "tmakit._native.DescribeFront", sizeof(DescribeFront), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL, front_slots,
};

static PyMethodDef module_methods[] = {
    {"bind_tensor_map", (PyCFunction)(void (*)(void))bind_tensor_map, METH_FASTCALL,
     "bind_tensor_map(TensorMap, field names): the type lookup_request builds"},
    {"lookup_request", (PyCFunction)(void (*)(void))lookup_request, METH_FASTCALL,
     "describe_tensor's request cache for torch-like tensors (tmakit/_hotpath.py)"},
    {"repoint", (PyCFunction)(void (*)(void))repoint, METH_FASTCALL,
     "cuTensorMapReplaceAddress through its entry point, returning the descriptor's 128 bytes"},
    {NULL, NULL, 0, NULL},
};

static int module_exec(PyObject *mod) {
  if (!(str_launch_slow = PyUnicode_InternFromString("_launch_slow"))) return -1;
  if (!(str_repeat_failed = PyUnicode_InternFromString("_repeat_failed"))) return -1;
  if (!(str_alive = PyUnicode_InternFromString("alive"))) return -1;
  if (!(str_data_ptr = PyUnicode_InternFromString("data_ptr"))) return -1;
  if (!(str_shape = PyUnicode_InternFromString("shape"))) return -1;
  if (!(str_stride = PyUnicode_InternFromString("stride"))) return -1;
  if (!(str_box = PyUnicode_InternFromString("box"))) return -1;
  PyType_Spec *specs[] = {&repeat_spec, &front_spec};
  const char *names[] = {"RepeatLaunch", "DescribeFront"};
  for (int i = 0; i < 2; ++i) {
    PyObject *type = PyType_FromModuleAndSpec(mod, specs[i], NULL);
    if (type == NULL) return -1;
    if (PyModule_AddObject(mod, names[i], type) < 0) {
      Py_DECREF(type);
      return -1;
    }
  }
  return 0;
}

static PyModuleDef_Slot module_slots[] = {{Py_mod_exec, module_exec}, {0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "tmakit._native", "tmakit's per-call host paths in C (see tmakit/_hotpath.py)", 0,
    module_methods, module_slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModuleDef_Init(&module_def); }
