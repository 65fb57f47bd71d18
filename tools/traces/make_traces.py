#!/usr/bin/env python3
"""Write the model traces for mgs-sim: ResNet-50, VGG-16 and BERT-base.

Parameter tensors are the real layer shapes, named and ordered as
torchvision / Hugging Face register them (the totals are checked against the
published counts below). Times come from a roofline model of a V100-class GPU
in fp32: each operator takes max(FLOPs / 10 TFLOP/s, bytes / 700 GB/s), about
70% of the V100's 15.7 TFLOP/s and 900 GB/s peaks. Backward of a convolution
or linear layer costs twice its forward FLOPs and bytes (input gradient plus
weight gradient; the first layer has no input gradient). Memory-bound
operators (BN, ReLU, pooling, softmax, LayerNorm, GELU, adds) move 2
activations forward and 3 backward.

backward_s of a tensor is the gap since the previous gradient became ready,
as the authors' profiler measures it (algorithms.md §1): the backward time of
the operator that owns it plus that of parameter-free operators run since the
previous gradient; the other tensors of the same operator get 0.

Usage: python3 make_traces.py [outdir]   (no third-party modules needed)
"""
import json
import math
import os
import sys

PEAK_FLOPS = 10e12
BANDWIDTH = 700e9
BYTES = 4
SOURCE = ("roofline model of a V100-class GPU, fp32: max(FLOPs/10 TFLOP/s, bytes/700 GB/s) per "
          "operator; backward = 2x forward for conv/linear, 1.5x for memory-bound ops "
          "(tools/traces/make_traces.py)")


class Model:
    """Forward operators in execution order, each with its parameters."""

    def __init__(self, batch):
        self.batch = batch
        self.ops = []  # (fwd_s, bwd_s, [(name, elements)])

    def _time(self, flops, nbytes):
        return max(flops / PEAK_FLOPS, nbytes / BANDWIDTH)

    def dense(self, params, flops, act_in, act_out, first=False):
        """A conv or linear layer: flops and activations per sample."""
        weights = sum(n for _, n in params)
        nbytes = (self.batch * (act_in + act_out) + weights) * BYTES
        fwd = self._time(self.batch * flops, nbytes)
        bwd = fwd * (1 if first else 2)
        self.ops.append((fwd, bwd, params))

    def memory(self, act, params=()):
        """A memory-bound operator over `act` elements per sample."""
        nbytes = self.batch * act * BYTES
        self.ops.append((2 * nbytes / BANDWIDTH, 3 * nbytes / BANDWIDTH, list(params)))

    def trace(self, name, extra):
        layers, pending = [], 0.0
        for fwd, bwd, params in reversed(self.ops):
            pending += bwd
            # Gradients of one operator become ready together: the time goes
            # to the first one, in reverse registration order like autograd.
            for pname, n in reversed(params):
                layers.append({"name": pname, "elements": n, "backward_s": round(pending, 10)})
                pending = 0.0
        layers[-1]["backward_s"] += pending  # parameter-free ops before the first layer
        forward = sum(op[0] for op in self.ops)
        return dict({"model": name, "batch": self.batch, "source": SOURCE, "forward_s": round(forward, 10),
                     "layers": layers}, **extra)


def conv(m, name, cin, cout, k, hw_in, stride=1, bias=False, first=False):
    hw_out = hw_in // stride
    params = [(name + ".weight", cout * cin * k * k)]
    if bias:
        params.append((name + ".bias", cout))
    flops = 2 * cout * cin * k * k * hw_out * hw_out
    m.dense(params, flops, cin * hw_in * hw_in, cout * hw_out * hw_out, first)
    return hw_out


def bn(m, name, c, hw):
    m.memory(c * hw * hw, [(name + ".weight", c), (name + ".bias", c)])


def resnet50(batch=64):
    m = Model(batch)
    hw = conv(m, "conv1", 3, 64, 7, 224, 2, first=True)
    bn(m, "bn1", 64, hw)
    m.memory(64 * hw * hw)  # relu
    hw //= 2
    m.memory(64 * hw * hw * 4)  # maxpool reads 4x its output
    inplanes = 64
    for li, (planes, blocks, stride) in enumerate([(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]):
        for b in range(blocks):
            p = "layer%d.%d." % (li + 1, b)
            s = stride if b == 0 else 1
            h1 = conv(m, p + "conv1", inplanes, planes, 1, hw)
            bn(m, p + "bn1", planes, h1)
            m.memory(planes * h1 * h1)
            h2 = conv(m, p + "conv2", planes, planes, 3, h1, s)
            bn(m, p + "bn2", planes, h2)
            m.memory(planes * h2 * h2)
            conv(m, p + "conv3", planes, planes * 4, 1, h2)
            bn(m, p + "bn3", planes * 4, h2)
            if b == 0:
                conv(m, p + "downsample.0", inplanes, planes * 4, 1, hw, s)
                bn(m, p + "downsample.1", planes * 4, h2)
            m.memory(2 * planes * 4 * h2 * h2)  # residual add + relu
            inplanes, hw = planes * 4, h2
    m.memory(2048 * hw * hw)  # global average pool
    m.dense([("fc.weight", 1000 * 2048), ("fc.bias", 1000)], 2 * 2048 * 1000, 2048, 1000)
    return m.trace("resnet50", {"input": "224x224"})


def vgg16(batch=64):
    m = Model(batch)
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    cin, hw, idx = 3, 224, 0
    for v in cfg:
        if v == "M":
            m.memory(cin * hw * hw)
            hw //= 2
        else:
            conv(m, "features.%d" % idx, cin, v, 3, hw, bias=True, first=idx == 0)
            m.memory(v * hw * hw)  # relu
            cin = v
            idx += 2
        if v == "M":
            idx += 1
    for i, (fin, fout) in zip((0, 3, 6), ((25088, 4096), (4096, 4096), (4096, 1000))):
        n = "classifier.%d" % i
        m.dense([(n + ".weight", fin * fout), (n + ".bias", fout)], 2 * fin * fout, fin, fout)
        m.memory(fout)
    return m.trace("vgg16", {"input": "224x224"})


def bert_base(batch=32, seq=128):
    m = Model(batch)
    d, ff, heads, vocab = 768, 3072, 12, 30522
    e = "embeddings."
    # Embedding backward scatters into dense gradients of the whole tables.
    m.ops.append((seq * d * BYTES * batch / BANDWIDTH,
                  (vocab + 512 + 2) * d * BYTES / BANDWIDTH + 3 * batch * seq * d * BYTES / BANDWIDTH,
                  [(e + "word_embeddings.weight", vocab * d),
                   (e + "position_embeddings.weight", 512 * d),
                   (e + "token_type_embeddings.weight", 2 * d)]))
    m.memory(seq * d, [(e + "LayerNorm.weight", d), (e + "LayerNorm.bias", d)])

    def linear(name, fin, fout):
        m.dense([(name + ".weight", fin * fout), (name + ".bias", fout)],
                2 * fin * fout * seq, fin * seq, fout * seq)

    for i in range(12):
        p = "encoder.layer.%d." % i
        for x in ("query", "key", "value"):
            linear(p + "attention.self." + x, d, d)
        m.dense([], 2 * seq * seq * d, 2 * seq * d, heads * seq * seq)  # Q K^T
        m.memory(heads * seq * seq)  # softmax (dropout folded in)
        m.dense([], 2 * seq * seq * d, heads * seq * seq + seq * d, seq * d)  # attn V
        linear(p + "attention.output.dense", d, d)
        m.memory(seq * d, [(p + "attention.output.LayerNorm.weight", d),
                           (p + "attention.output.LayerNorm.bias", d)])
        linear(p + "intermediate.dense", d, ff)
        m.memory(seq * ff)  # gelu
        linear(p + "output.dense", ff, d)
        m.memory(seq * d, [(p + "output.LayerNorm.weight", d), (p + "output.LayerNorm.bias", d)])
    m.dense([("pooler.dense.weight", d * d), ("pooler.dense.bias", d)], 2 * d * d, d, d)
    return m.trace("bert-base", {"input": "seq %d" % seq})


# Published parameter counts (torchvision, Hugging Face bert-base-uncased with pooler).
EXPECTED = {"resnet50": (25557032, 161), "vgg16": (138357544, 32), "bert-base": (109482240, 199)}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for trace in (resnet50(), vgg16(), bert_base()):
        total = sum(l["elements"] for l in trace["layers"])
        assert (total, len(trace["layers"])) == EXPECTED[trace["model"]], (trace["model"], total)
        bwd = sum(l["backward_s"] for l in trace["layers"])
        path = os.path.join(out, trace["model"].replace("-", "_") + ".json")
        with open(path, "w") as f:
            json.dump(trace, f, indent=1)
            f.write("\n")
        print("%-10s %4d tensors %11d params  forward %6.1f ms  backward %6.1f ms  -> %s" % (
            trace["model"], len(trace["layers"]), total, trace["forward_s"] * 1e3, bwd * 1e3, path))
    assert not math.isnan(bwd)


if __name__ == "__main__":
    main()
