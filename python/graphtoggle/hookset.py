"""HookSet: an immutable set of hooks (type name, layer) over one agent's catalog.

The bits are libtoggle's toggle_set bitmap (hook index = type * 256 + layer)
held as a Python int; conversion to and from the C struct is a byte copy.
"""

from . import _lib
from .errors import OutOfCatalogError, SpecError

_SET_BYTES = _lib.MAX_HOOKS // 8


class Catalog:
    """The agent's hook catalog: type names (in order) and the layer count."""

    __slots__ = ("names", "n_layers", "_index", "_c", "_keep")

    def __init__(self, names, n_layers):
        self.names = tuple(names)
        self.n_layers = int(n_layers)
        self._index = {n: i for i, n in enumerate(self.names)}
        self._keep = [n.encode() for n in self.names]
        arr = (_lib.ctypes.c_char_p * len(self._keep))(*self._keep)
        self._keep.append(arr)
        self._c = _lib.Catalog(arr, len(self.names), self.n_layers)

    def type_index(self, name):
        if isinstance(name, int) and not isinstance(name, bool):
            if 0 <= name < len(self.names):
                return name
            raise OutOfCatalogError("hook type %d outside the catalog (0..%d)"
                                    % (name, len(self.names) - 1))
        i = self._index.get(name)
        if i is None:
            raise SpecError("unknown hook type %r (known: %s)" % (name, ", ".join(self.names)))
        return i

    def hook(self, hook):
        """(type name or index, layer) -> (type index, layer), checked."""
        try:
            t, layer = hook
        except (TypeError, ValueError):
            raise SpecError("a hook is a (type, layer) pair, e.g. ('resid_post', 3); got %r"
                            % (hook,)) from None
        ti = self.type_index(t)
        if isinstance(layer, bool) or not isinstance(layer, int):
            raise SpecError("hook layer must be an int, got %r" % (layer,))
        if not 0 <= layer < self.n_layers:
            raise OutOfCatalogError("layer %d of %s outside the catalog (0..%d)"
                                    % (layer, self.names[ti], self.n_layers - 1))
        return ti, layer

    def parse(self, spec):
        """A hook spec string (toggle_hooks.h's grammar) -> bits."""
        out = _lib.Set()
        err = _lib.ctypes.create_string_buffer(256)
        rc = _lib.lib().toggle_set_parse(_lib.ctypes.byref(self._c), spec.encode(),
                                         _lib.ctypes.byref(out), err, len(err))
        if rc:
            raise SpecError("bad hook spec %r: %s" % (spec, err.value.decode(errors="replace")))
        return int.from_bytes(bytes(out), "little")

    def bits_of(self, hooks):
        """Anything a HookSet can be made of -> bits: a HookSet, a spec string, None (no
        hook), or an iterable of (type, layer) pairs and spec strings."""
        if isinstance(hooks, HookSet):
            if hooks.catalog is not self and (hooks.catalog.names != self.names
                                              or hooks.catalog.n_layers != self.n_layers):
                raise OutOfCatalogError("hook set of another catalog")
            return hooks.bits
        if hooks is None:
            return 0
        if isinstance(hooks, str):
            return self.parse(hooks)
        bits = 0
        try:
            items = iter(hooks)
        except TypeError:
            raise SpecError("hooks must be a spec string, a HookSet or an iterable of "
                            "(type, layer) pairs; got %r" % (hooks,)) from None
        for h in items:
            if isinstance(h, str):
                bits |= self.parse(h)
            else:
                t, layer = self.hook(h)
                bits |= 1 << (t * _lib.MAX_LAYERS + layer)
        return bits

    def to_c(self, bits, out=None):
        out = out if out is not None else _lib.Set()
        _lib.ctypes.memmove(_lib.ctypes.addressof(out), bits.to_bytes(_SET_BYTES, "little"),
                            _SET_BYTES)
        return out


class HookSet:
    """An immutable set of (type name, layer) hooks.  Compares equal to another HookSet
    with the same hooks and to a Python set of (type name, layer) tuples."""

    __slots__ = ("catalog", "_bits", "_raw", "_c", "_format")

    def __init__(self, catalog, bits=None, raw=None):
        self.catalog = catalog
        self._bits = bits
        self._raw = raw  # the C bitmap's bytes; bits are decoded from it on first use
        self._c = None
        self._format = None

    @property
    def bits(self):
        if self._bits is None:
            self._bits = int.from_bytes(self._raw, "little")
        return self._bits

    def _cset(self):
        """The C toggle_set, made once per HookSet (set_enabled of a kept set is a copy)."""
        if self._c is None:
            if self._raw is not None:
                self._c = _lib.Set.from_buffer_copy(self._raw)
            else:
                self._c = self.catalog.to_c(self.bits)
        return self._c

    @classmethod
    def _from_c(cls, catalog, cset):
        return cls(catalog, raw=bytes(cset))

    def __contains__(self, hook):
        try:
            t, layer = self.catalog.hook(hook)
        except (SpecError, OutOfCatalogError):
            return False
        return bool(self.bits >> (t * _lib.MAX_LAYERS + layer) & 1)

    def __iter__(self):
        bits, names = self.bits, self.catalog.names
        while bits:
            low = bits & -bits
            i = low.bit_length() - 1
            yield names[i // _lib.MAX_LAYERS], i % _lib.MAX_LAYERS
            bits ^= low
    # (type, layer) in catalog order, layers ascending

    def __len__(self):
        return bin(self.bits).count("1")

    def __bool__(self):
        return self.bits != 0

    def __eq__(self, other):
        if isinstance(other, HookSet):
            if self._raw is not None and other._raw is not None:
                return self._raw == other._raw and self.catalog.names == other.catalog.names
            return self.bits == other.bits and self.catalog.names == other.catalog.names
        if isinstance(other, (set, frozenset)):
            try:
                return self.bits == self.catalog.bits_of(other)
            except (SpecError, OutOfCatalogError):
                return False
        return NotImplemented

    def __hash__(self):
        return hash(self.bits)

    def __or__(self, other):
        return HookSet(self.catalog, self.bits | self.catalog.bits_of(other))

    def __and__(self, other):
        return HookSet(self.catalog, self.bits & self.catalog.bits_of(other))

    def __sub__(self, other):
        return HookSet(self.catalog, self.bits & ~self.catalog.bits_of(other))

    def to_set(self):
        return set(self)

    def spec(self):
        """The canonical spec text (toggle_set_format): "none", "all" or "type:a-b,..."."""
        if self._format is None:
            c = self._cset()
            lib = _lib.lib()
            cat = _lib.ctypes.byref(self.catalog._c)
            n = lib.toggle_set_format(cat, _lib.ctypes.byref(c), None, 0)
            if n < 0:
                raise OutOfCatalogError("hook set holds hooks outside the catalog")
            buf = _lib.ctypes.create_string_buffer(n + 1)
            lib.toggle_set_format(cat, _lib.ctypes.byref(c), buf, n + 1)
            self._format = buf.value.decode()
        return self._format

    def __str__(self):
        return self.spec()

    def __repr__(self):
        return "HookSet(%r)" % self.spec()
