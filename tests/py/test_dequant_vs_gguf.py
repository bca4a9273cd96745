"""cellm's reference (de)quantization against the gguf package's numpy implementation.

Dequantization must agree bit for bit: on every tensor of the default models and on random
blocks of every weight format. Quantizers that gguf also implements must produce the same
bytes; the k-quant quantizers (which gguf lacks) must decode through gguf to a close
approximation of their input. The C++ side is tests/tools/dequant_dump.
"""
import subprocess
import time

import numpy as np
import pytest
from conftest import build_dir
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as QType, GGUFReader
from gguf.quants import dequantize, quantize

CHUNK_ELEMENTS = 1 << 21  # numpy works on a few MiB at a time, whatever the tensor size
RANDOM_BLOCKS = 4096
# Byte offsets of the fp16 scale fields of each block, kept finite in random blocks.
FP16_FIELDS = {
    QType.Q8_0: [0], QType.Q4_0: [0], QType.Q4_1: [0, 2], QType.Q5_0: [0], QType.Q5_1: [0, 2],
    QType.Q4_K: [0, 2], QType.Q5_K: [0, 2], QType.Q6_K: [208],
}


@pytest.fixture(scope="module")
def tool():
    path = build_dir() / "bin" / "dequant_dump"
    if not path.exists():
        pytest.fail(f"{path} is missing: build the dequant_dump target")
    return str(path)


def run_tool(tool, args, data: bytes) -> bytes:
    done = subprocess.run([tool, *args], input=data, capture_output=True, check=False)
    assert done.returncode == 0, f"dequant_dump {' '.join(args)} failed: {done.stderr.decode()}"
    return done.stdout


def assert_same_floats(actual: np.ndarray, expected: np.ndarray, what: str):
    """Equal as bit patterns; any NaN matches any NaN."""
    assert actual.shape == expected.shape, f"{what}: {actual.shape} values, expected {expected.shape}"
    same = (actual.view(np.uint32) == expected.view(np.uint32)) | (np.isnan(actual) & np.isnan(expected))
    if not same.all():
        i = int(np.argmin(same))
        raise AssertionError(
            f"{what}: {int((~same).sum())} of {same.size} values differ; first at {i}: "
            f"cellm {actual[i]!r} (0x{actual.view(np.uint32)[i]:08x}), "
            f"gguf {expected[i]!r} (0x{expected.view(np.uint32)[i]:08x})")


def read_exactly(stream, size: int) -> bytes:
    data = stream.read(size)
    assert len(data) == size, f"dequant_dump ended early ({len(data)} of {size} bytes)"
    return data


@pytest.mark.parametrize("model_fixture", ["smollm2", "gemma3"])
def test_every_model_tensor_dequantizes_like_gguf(request, tool, model_fixture):
    path = request.getfixturevalue(model_fixture)  # skips, with the fetch command, when missing
    model_name = path.name
    start = time.monotonic()
    reader = GGUFReader(path)
    quant_blocks = float_elements = 0
    proc = subprocess.Popen([tool, "model", str(path)], stdout=subprocess.PIPE)
    try:
        for tensor in reader.tensors:
            qtype = QType(tensor.tensor_type)
            header = proc.stdout.readline().decode().split()
            assert [header[0], header[1].upper(), int(header[2])] == [tensor.name, qtype.name, int(tensor.n_elements)]
            block_size, type_size = GGML_QUANT_SIZES[qtype]
            row_bytes = int(tensor.shape[0]) // block_size * type_size
            rows = np.asarray(tensor.data).view(np.uint8).reshape(-1, row_bytes)
            step = max(1, CHUNK_ELEMENTS // int(tensor.shape[0]))
            for first in range(0, rows.shape[0], step):
                expected = dequantize(rows[first:first + step], qtype).reshape(-1)
                actual = np.frombuffer(read_exactly(proc.stdout, expected.nbytes), dtype=np.float32)
                assert_same_floats(actual, expected, f"{model_name}: {tensor.name} ({qtype.name}) rows from {first}")
            if block_size > 1:
                quant_blocks += int(tensor.n_elements) // block_size
            else:
                float_elements += int(tensor.n_elements)
        assert proc.stdout.read(1) == b"", "dequant_dump wrote more tensors than the file has"
        assert proc.wait() == 0
    finally:
        proc.kill()
        proc.wait()
    print(f"\n{model_name}: {len(reader.tensors)} tensors bit-identical ({quant_blocks} quantized blocks, "
          f"{float_elements} float elements) in {time.monotonic() - start:.1f} s")


def random_blocks(qtype: QType, seed: int) -> np.ndarray:
    """Random block bytes whose fp16 scales are finite (subnormals included)."""
    rng = np.random.default_rng(seed)
    _, type_size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(RANDOM_BLOCKS, type_size), dtype=np.uint8)
    for offset in FP16_FIELDS.get(qtype, []):
        halves = raw[:, offset:offset + 2].copy().view(np.uint16)
        halves ^= np.where((halves & 0x7C00) == 0x7C00, np.uint16(0x4000), np.uint16(0))
        raw[:, offset:offset + 2] = halves.view(np.uint8)
    return raw


# Plain types take random bit patterns, NaNs and infinities included.
DEQUANT_TYPES = [QType.F32, QType.F16, QType.BF16, *FP16_FIELDS]


@pytest.mark.parametrize("qtype", DEQUANT_TYPES, ids=lambda t: t.name)
def test_random_blocks_dequantize_like_gguf(tool, qtype):
    raw = random_blocks(qtype, seed=int(qtype))
    expected = dequantize(raw, qtype).reshape(-1)
    actual = np.frombuffer(run_tool(tool, ["dequantize", qtype.name], raw.tobytes()), dtype=np.float32)
    assert_same_floats(actual, expected, f"random {qtype.name} blocks")


def quantizer_input(seed: int, bit_patterns: str | None) -> np.ndarray:
    """Blocks of 32 values at scales from 1e-4 to 1e4, plus the edge cases rounding hides in.

    bit_patterns "finite" / "any" replaces every other value with random float32 bits (every
    exponent; NaN and infinity only for "any"), for the 16-bit float conversions.
    """
    rng = np.random.default_rng(seed)
    blocks = rng.standard_normal((RANDOM_BLOCKS, 32)).astype(np.float32)
    blocks *= (10.0 ** rng.uniform(-4, 4, size=(RANDOM_BLOCKS, 1))).astype(np.float32)
    blocks[1::7] = np.abs(blocks[1::7])  # one-signed blocks: the min / max is not zero
    blocks[2::7] = -np.abs(blocks[2::7])
    blocks[0] = 0.0
    blocks[3] = 2.5  # constant block
    blocks[4] = np.arange(-15.5, 16.5)  # levels landing on exact halves
    blocks[5] = np.arange(-16, 16) * 0.25
    blocks[6, :] = 1.0
    blocks[6, [3, 9]] = [-3.0, 3.0]  # largest magnitudes tie with opposite signs
    blocks[7, :] = 1.0
    blocks[7, [3, 9]] = [3.0, -3.0]
    if bit_patterns:
        bits = rng.integers(0, 2**32, size=RANDOM_BLOCKS * 32 // 2, dtype=np.uint32)
        if bit_patterns == "finite":
            bits ^= np.where((bits & 0x7F800000) == 0x7F800000, np.uint32(0x00800000), np.uint32(0))
        blocks.reshape(-1)[::2] = bits.view(np.float32)
    return blocks


def near_tie_blocks(qtype: QType, seed: int, count: int = 256) -> np.ndarray:
    """Blocks of Q4_0/Q4_1/Q5_0/Q5_1 whose scaled values sit a few ulps from a level boundary,
    chosen so that a fused multiply-add (one rounding instead of two) would change a level: they
    make the byte comparison fail if the compiler contracts the quantizer's arithmetic."""
    rng = np.random.default_rng(seed)
    bits = 4 if qtype in (QType.Q4_0, QType.Q4_1) else 5
    n = count * 32  # only a few percent of candidates have a sensitive element
    d = (10.0 ** rng.uniform(-3, 3, size=(n, 1))).astype(np.float32)
    ulps = 1 + rng.integers(-4, 5, size=(n, 32)) * 2.0**-23
    if qtype in (QType.Q4_0, QType.Q5_0):
        offset = 2 ** (bits - 1)
        levels = rng.integers(-offset + 1, offset, size=(n, 32)) - 0.5
        x = (levels * d * ulps).astype(np.float32)
        x[:, :1] = -offset * d  # the largest magnitude, so gguf's scale is exactly d
        inverse = np.float32(1) / (x[:, :1] / np.float32(-offset))
        scaled, bias, top = x, np.float32(offset + 0.5), 2 * offset - 1
    else:
        top = 2**bits - 1
        low = (-d * rng.uniform(0, top, size=(n, 1))).astype(np.float32)
        x = (low + (rng.integers(0, top, size=(n, 32)) + 0.5) * d * ulps).astype(np.float32)
        x[:, :1], x[:, 1:2] = low, low + top * d
        inverse = np.float32(1) / ((x.max(axis=1, keepdims=True) - x.min(axis=1, keepdims=True)) / np.float32(top))
        scaled, bias = x - x.min(axis=1, keepdims=True), np.float32(0.5)
    two_roundings = np.clip(np.trunc(scaled * inverse + bias), 0, top)
    one_rounding = np.clip(np.trunc((scaled.astype(np.float64) * inverse + bias).astype(np.float32)), 0, top)
    sensitive = x[(two_roundings != one_rounding).any(axis=1)][:count]
    assert len(sensitive) >= count // 4, f"only {len(sensitive)} FMA-sensitive {qtype.name} blocks"
    return sensitive


EXACT_QUANT_TYPES = [QType.Q8_0, QType.Q4_0, QType.Q4_1, QType.Q5_0, QType.Q5_1, QType.F16, QType.BF16]


@pytest.mark.parametrize("qtype", EXACT_QUANT_TYPES, ids=lambda t: t.name)
@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # float32 beyond fp16 range -> inf
def test_quantizers_match_gguf_bytes(tool, qtype):
    # fp16 NaNs are left out: numpy keeps a signalling NaN's payload, cellm (like the F16C
    # instructions ggml uses) quiets it.
    bit_patterns = {QType.F16: "finite", QType.BF16: "any"}.get(qtype)
    data = quantizer_input(seed=100 + int(qtype), bit_patterns=bit_patterns)
    if qtype in (QType.Q4_0, QType.Q4_1, QType.Q5_0, QType.Q5_1):
        data = np.concatenate([data, near_tie_blocks(qtype, seed=300 + int(qtype))])
    expected = quantize(data, qtype).view(np.uint8).reshape(-1)
    actual = np.frombuffer(run_tool(tool, ["quantize", qtype.name], data.tobytes()), dtype=np.uint8)
    assert actual.shape == expected.shape
    differ = np.flatnonzero(actual != expected)
    assert differ.size == 0, f"{differ.size} bytes differ, first at byte {differ[0]}"


# Worst RMS error / RMS of the input over 256 Gaussian super-blocks; cellm reaches about 0.078,
# 0.040 and 0.019 (Q4_1, which stores more scale bits, reaches about 0.09).
K_QUANT_RMS_BOUND = {QType.Q4_K: 0.09, QType.Q5_K: 0.046, QType.Q6_K: 0.023}


@pytest.mark.parametrize("qtype", list(K_QUANT_RMS_BOUND), ids=lambda t: t.name)
def test_k_quantizers_decode_through_gguf(tool, qtype):
    rng = np.random.default_rng(200 + int(qtype))
    data = rng.standard_normal((256, 256)).astype(np.float32)
    data *= (10.0 ** rng.uniform(-3, 3, size=(256, 1))).astype(np.float32)
    encoded = np.frombuffer(run_tool(tool, ["quantize", qtype.name], data.tobytes()), dtype=np.uint8)
    decoded = dequantize(encoded.reshape(256, -1), qtype)
    relative = np.sqrt(np.mean((decoded - data) ** 2, axis=1) / np.mean(data**2, axis=1))
    assert relative.max() < K_QUANT_RMS_BOUND[qtype], f"worst block relative RMS error {relative.max():.4f}"

