"""Channel modes in a serving Iris (spec 003): the agents a passthrough may name, the
passthrough relay and the admin commands. The decision itself is
:mod:`iris_runtime.engine.dispatch`; the file is :mod:`iris_runtime.engine.dispatch_config`."""
