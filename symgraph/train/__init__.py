"""Training: Module.fit and what it uses.

    import symgraph as sg
    mod = sg.mod.Module(net, context=[sg.cpu(0), sg.cpu(1)])
    mod.fit(train_iter, eval_data=val_iter, optimizer='sgd',
            optimizer_params={'learning_rate': 0.1, 'momentum': 0.9}, num_epoch=10)

The parts, each a module of its own (and an ``sg.<name>`` attribute):
``module`` (Module, checkpoints), ``optimizer``, ``lr_scheduler``,
``initializer`` (``sg.init``), ``metric``, ``callback``, ``io`` (data
iterators), ``step`` (the compiled training programs) and ``checkpoint``
(the ``.params`` file format); for fast CIFAR-10, ``cifar`` (the data in
memory as uint8), ``augment`` (crop, flip and cutout on the device) and
``ema`` (the Module's moving average of the weights). Data parallelism and the KVStore live in
``symgraph.parallel``.
"""
from ..errors import SymgraphError


class TrainError(SymgraphError):
    """Misuse of the training API: a module used before bind, a batch that
    does not fit the bound shapes, an unknown optimizer or metric name."""
