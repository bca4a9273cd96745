// Drives cellm's reference quantization for tests/py/test_dequant_vs_gguf.py, which compares
// its output with the gguf package's numpy implementation.
//
//   dequant_dump model FILE.gguf   for every tensor in file order: a line "NAME TYPE ELEMENTS\n",
//                                  then ELEMENTS native float32 values
//   dequant_dump dequantize TYPE   stdin: whole blocks of TYPE; stdout: float32 values
//   dequant_dump quantize TYPE     stdin: float32 values (whole blocks); stdout: blocks of TYPE
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "gguf/dequantize.h"
#include "gguf/file.h"
#include "gguf/quantize.h"

namespace {

using cellm::DType;
using cellm::ErrorCode;

void write_all(const void* data, size_t bytes) {
  if (bytes != 0 && std::fwrite(data, 1, bytes, stdout) != bytes) cellm::fail(ErrorCode::Io, "cannot write stdout");
}

std::vector<char> read_stdin() {
  return {std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
}

DType parse_type(const std::string& name) {
  const auto type = cellm::dtype_from_name(name);
  if (!type) cellm::fail(ErrorCode::InvalidArgument, "unknown type '", name, "'");
  return *type;
}

void dump_model(const std::string& path) {
  const auto file = cellm::gguf::File::open(path);
  std::vector<float> out;
  for (const auto& tensor : file->tensors()) {
    const int64_t row = tensor.dims.empty() ? 1 : tensor.dims[0];
    const size_t bytes_per_row = cellm::row_bytes(tensor.type, row);
    const std::string header = cellm::str_cat(tensor.name, " ", cellm::dtype_name(tensor.type), " ",
                                              tensor.elements(), "\n");
    write_all(header.data(), header.size());
    // A few rows at a time keeps memory flat however large the tensor.
    const int64_t rows_per_chunk = std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(row, 1));
    for (int64_t first = 0; first < tensor.rows(); first += rows_per_chunk) {
      const int64_t rows = std::min(rows_per_chunk, tensor.rows() - first);
      out.resize(static_cast<size_t>(rows * row));
      cellm::gguf::dequantize_row(tensor.type, tensor.data + first * bytes_per_row, out.data(), rows * row);
      write_all(out.data(), out.size() * sizeof(float));
    }
  }
}

void dequantize_stdin(DType type) {
  const std::vector<char> in = read_stdin();
  const auto& info = cellm::dtype_info(type);
  if (in.size() % info.block_bytes != 0)
    cellm::fail(ErrorCode::InvalidArgument, in.size(), " bytes are not whole ", info.name, " blocks");
  const auto n = static_cast<int64_t>(in.size() / info.block_bytes * info.block_size);
  std::vector<float> out(static_cast<size_t>(n));
  cellm::gguf::dequantize_row(type, in.data(), out.data(), n);
  write_all(out.data(), out.size() * sizeof(float));
}

void quantize_stdin(DType type) {
  const std::vector<char> in = read_stdin();
  if (in.size() % sizeof(float) != 0) cellm::fail(ErrorCode::InvalidArgument, "stdin is not float32 values");
  std::vector<float> values(in.size() / sizeof(float));
  std::copy(in.begin(), in.end(), reinterpret_cast<char*>(values.data()));
  const auto n = static_cast<int64_t>(values.size());
  std::vector<char> out(cellm::row_bytes(type, n));
  cellm::gguf::quantize_row(type, values.data(), out.data(), n);
  write_all(out.data(), out.size());
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.size() == 2 && args[0] == "model") {
      dump_model(args[1]);
    } else if (args.size() == 2 && args[0] == "dequantize") {
      dequantize_stdin(parse_type(args[1]));
    } else if (args.size() == 2 && args[0] == "quantize") {
      quantize_stdin(parse_type(args[1]));
    } else {
      std::fprintf(stderr, "usage: dequant_dump model FILE.gguf | dequantize TYPE | quantize TYPE\n");
      return 2;
    }
    return std::fflush(stdout) == 0 ? 0 : 1;
  } catch (const cellm::Error& e) {
    std::fprintf(stderr, "dequant_dump: %s\n", e.what());
    return 1;
  }
}
