"""Writing a model's state dict as a GGUF file with gguf-py (`gguf.GGUFWriter`), for the pipeline parity fixtures of
quantized transformers (issue 26), and reading it back as gguf-py decodes it.

gguf-py 0.19 quantizes Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, BF16 and F16 itself but not the K-quants (its Q4_K has a decoder
only), so `q4_k_quantize` is a plain min/scale quantizer in the layout gguf-py's Q4_K decoder reads (ggml's
block_q4_K: f16 d, f16 dmin, 12 bytes of packed 6-bit scales and mins, 128 bytes of nibbles). The reference is always
gguf-py's own decode of the written file (`read_dense`), so the quantizer's choices only set which values are tested.
"""

import numpy as np
import torch

import gguf
from gguf import GGMLQuantizationType as Q

QK_K = 256


def q4_k_quantize(w):
    """float32 [..., n * 256] -> uint8 [..., n * 144] of Q4_K blocks."""
    rows = np.asarray(w, dtype=np.float32).reshape(-1, QK_K)
    nb = rows.shape[0]
    sub = rows.reshape(nb, 8, 32)
    mn = np.maximum(-sub.min(axis=2), 0.0)        # y = d * sc * q - dmin * m, q in 0..15
    step = (sub.max(axis=2) + mn) / 15.0
    d = (step.max(axis=1) / 63.0).astype(np.float16)
    dmin = (mn.max(axis=1) / 63.0).astype(np.float16)
    d32, dm32 = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    sc = np.round(np.divide(step, d32, out=np.zeros_like(step), where=d32 > 0)).clip(0, 63).astype(np.uint8)
    m = np.round(np.divide(mn, dm32, out=np.zeros_like(mn), where=dm32 > 0)).clip(0, 63).astype(np.uint8)
    eff_step = (d32 * sc.astype(np.float32))[:, :, None]
    eff_off = (dm32 * m.astype(np.float32))[:, :, None]
    q = np.round(np.divide(sub + eff_off, eff_step, out=np.zeros_like(sub), where=eff_step > 0))
    q = q.clip(0, 15).astype(np.uint8)
    scales = np.zeros((nb, 12), np.uint8)       # gguf-py Q4_K.get_scale_min, inverted
    scales[:, 0:4] = (sc[:, 0:4] & 0x3F) | ((sc[:, 4:8] >> 4) << 6)
    scales[:, 4:8] = (m[:, 0:4] & 0x3F) | ((m[:, 4:8] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:8] & 0x0F) | ((m[:, 4:8] & 0x0F) << 4)
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(nb, 128)  # byte g*32+i: sub-blocks 2g (low), 2g+1 (high)
    blocks = np.concatenate([d.view(np.uint8).reshape(nb, 2), dmin.view(np.uint8).reshape(nb, 2), scales, qs], axis=1)
    shape = np.shape(w)
    return blocks.reshape(*shape[:-1], shape[-1] // QK_K * 144)


def encode(w, qtype):
    """A float32 numpy tensor in `qtype`: (payload, raw_dtype for add_tensor or None)."""
    if qtype == Q.F32:
        return w.astype(np.float32), None
    if qtype == Q.F16:
        return w.astype(np.float16), None
    if qtype == Q.Q4_K:
        return q4_k_quantize(w), qtype
    return gguf.quants.quantize(w.astype(np.float32), qtype), qtype


def write(path, state, type_of, arch="ddo-test", prefix=""):
    """state: name -> torch tensor; type_of(name, tensor) -> GGMLQuantizationType. Names get `prefix`."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("ddo parity fixture")
    for name, t in state.items():
        payload, raw = encode(t.detach().float().numpy(), type_of(name, t))
        if raw is None:
            w.add_tensor(prefix + name, payload)
        else:
            w.add_tensor(prefix + name, payload, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def read_dense(path, prefix=""):
    """gguf-py's reading and decoding of every tensor of the file (float32, PyTorch order; `prefix` removed), and the
    type name of each."""
    dense, types = {}, {}
    for t in gguf.GGUFReader(str(path)).tensors:
        y = gguf.quants.dequantize(t.data, t.tensor_type)
        shape = tuple(int(d) for d in reversed(t.shape))
        name = t.name[len(prefix):] if prefix and t.name.startswith(prefix) else t.name
        dense[name] = torch.from_numpy(np.array(y, dtype=np.float32).reshape(shape))
        types[name] = t.tensor_type.name
    return dense, types
