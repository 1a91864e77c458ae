"""The data layer: the text a run trains on. ``corpus`` (the embedded corpus, local
files, hub datasets, registered with torchtitan), ``prepared`` (pre-tokenized folders:
their format and checks), ``prepared_loader`` (reading one through torchtitan's
encoding) and ``global_order`` (one sample stream for the whole job, whatever its world
size). Above the base modules, below ``model/``; writing a prepared folder is a cluster
tool (``ops/data_prepare.py``)."""
