"""Bake a fitted standardisation into an exported model: ``(x - mean) / std`` before its graph,
so the exported model takes the same raw features ``pytrain train --standardize`` was given."""
from __future__ import annotations

from pytrain.data import Standardizer


def prepend_standardizer(model_bytes: bytes, input_name: str, std: Standardizer) -> bytes:
    """A copy of the model whose input ``input_name`` is standardised before anything reads it."""
    from pytrain.proto import ModelProto, from_array, make_node

    model = ModelProto.FromString(model_bytes)
    g = model.graph
    taken = {t.name for t in g.initializer} | {v.name for v in g.input} | {v.name for v in g.output}
    for n in g.node:
        taken.update(n.input)
        taken.update(n.output)

    def fresh(base: str) -> str:
        name, i = base, 1
        while name in taken:
            i += 1
            name = "{}_{}".format(base, i)
        taken.add(name)
        return name

    mean_name, std_name = fresh(input_name + "/std_mean"), fresh(input_name + "/std_scale")
    centred, scaled = fresh(input_name + "/centred"), fresh(input_name + "/standardized")
    for n in g.node:
        for i, name in enumerate(n.input):
            if name == input_name:
                n.input[i] = scaled
    g.initializer.extend([from_array(std.mean, mean_name), from_array(std.std, std_name)])
    g.node[0:0] = [make_node("Sub", [input_name, mean_name], [centred]),
                   make_node("Div", [centred, std_name], [scaled])]
    return model.SerializeToString()
