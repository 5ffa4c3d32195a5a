"""torch.library and torch.ops of the fake: ops defined with Library("ns", "DEF").define
(schema string), given a kernel with impl(name, fn, key) and a fake implementation with
register_fake("ns::name"); torch.ops.ns.name(...) and its .default call the kernel."""


class _Op:
    def __init__(self, qualname, schema, tags):
        self.qualname, self.schema, self.tags = qualname, schema, tuple(tags)
        self.kernel = None
        self.fake = None
        self.default = self

    def __call__(self, *args, **kwargs):
        if self.kernel is None:
            raise NotImplementedError("%s has no kernel" % self.qualname)
        return self.kernel(*args, **kwargs)


class _Namespace:
    def __init__(self, name):
        self._name = name
        self._ops = {}

    def __getattr__(self, name):
        try:
            return self.__dict__["_ops"][name]
        except KeyError:
            raise AttributeError("'_OpNamespace' 'torch.ops.%s' object has no attribute %r"
                                 % (self.__dict__["_name"], name)) from None


class _Ops:
    def __init__(self):
        self._ns = {}

    def __getattr__(self, ns):
        if ns.startswith("__"):
            raise AttributeError(ns)
        d = self.__dict__["_ns"]
        if ns not in d:
            d[ns] = _Namespace(ns)
        return d[ns]


ops = _Ops()


class Library:
    def __init__(self, ns, kind):
        assert kind == "DEF"
        self.ns = ns

    def define(self, schema, tags=()):
        name = schema.split("(", 1)[0]
        space = getattr(ops, self.ns)
        if name in space._ops:
            raise RuntimeError("%s::%s is already defined" % (self.ns, name))
        space._ops[name] = _Op("%s::%s" % (self.ns, name), schema, tags)

    def impl(self, name, fn, key):
        getattr(ops, self.ns)._ops[name].kernel = fn


def register_fake(qualname):
    ns, name = qualname.split("::")

    def deco(fn):
        getattr(ops, ns)._ops[name].fake = fn
        return fn
    return deco
