#include <gtest/gtest.h>

#include <cstring>

#include "common/expect_error.h"
#include "core/error.h"
#include "gguf/file.h"
#include "gguf/writer.h"

namespace cellm::gguf {
namespace {

// A writer holding one value of every metadata type and three tensors.
Writer sample_writer() {
  Writer w;
  w.set("u8", Value::u8(200));
  w.set("i8", Value::i8(-100));
  w.set("u16", Value::u16(60000));
  w.set("i16", Value::i16(-30000));
  w.set_u32("u32", 4000000000u);
  w.set("i32", Value::i32(-2000000000));
  w.set("u64", Value::u64(18000000000000000000ull));
  w.set("i64", Value::i64(-9000000000000000000ll));
  w.set_f32("f32", 0.25f);
  w.set("f64", Value::f64(1e300));
  w.set_bool("flag", true);
  w.set_string("name", "cellm \xe2\x9c\x93");
  w.set_strings("words", {"a", "", "three"});
  w.set_f32s("scores", {1.5f, -2.0f});
  w.set_i32s("types", {1, 2, 3});
  Array inner1, inner2, outer;
  inner1.elem_type = ValueType::U8;
  inner1.ints = {1, 2};
  inner2.elem_type = ValueType::U8;
  inner2.ints = {3};
  outer.elem_type = ValueType::Array;
  outer.arrays = {inner1, inner2};
  w.set("nested", Value::array(outer));
  std::vector<uint8_t> f32s(4 * 8);
  for (int i = 0; i < 8; ++i) {
    const float v = static_cast<float>(i) - 3.5f;
    std::memcpy(f32s.data() + 4 * i, &v, 4);
  }
  w.add_tensor("a", {4, 2}, DType::F32, f32s);
  w.add_tensor("b", {32}, DType::Q8_0, std::vector<uint8_t>(34, 7));
  w.add_tensor("c", {3}, DType::F16, std::vector<uint8_t>(6, 1));
  return w;
}

TEST(GgufReader, RoundTripsEveryValueTypeAndTensor) {
  const auto bytes = sample_writer().to_bytes();
  const auto f = File::parse(bytes, "sample");
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->get_uint("u8"), 200u);
  EXPECT_EQ(f->get_int("i8"), -100);
  EXPECT_EQ(f->get_uint("u16"), 60000u);
  EXPECT_EQ(f->get_int("i16"), -30000);
  EXPECT_EQ(f->get_uint("u32"), 4000000000u);
  EXPECT_EQ(f->get_int("i32"), -2000000000);
  EXPECT_EQ(f->get_uint("u64"), 18000000000000000000ull);
  EXPECT_EQ(f->get_int("i64"), -9000000000000000000ll);
  EXPECT_EQ(f->get_float("f32"), 0.25);
  EXPECT_EQ(f->get_float("f64"), 1e300);
  EXPECT_TRUE(f->get_bool("flag"));
  EXPECT_EQ(f->get_string("name"), "cellm \xe2\x9c\x93");
  EXPECT_EQ(f->get_string_array("words"), (std::vector<std::string>{"a", "", "three"}));
  EXPECT_EQ(f->get_float_array("scores"), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(f->get_int_array("types"), (std::vector<int64_t>{1, 2, 3}));
  const Array& nested = f->get_array("nested");
  ASSERT_EQ(nested.elem_type, ValueType::Array);
  ASSERT_EQ(nested.arrays.size(), 2u);
  EXPECT_EQ(nested.arrays[0].ints, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(nested.arrays[1].ints, (std::vector<int64_t>{3}));

  ASSERT_EQ(f->tensors().size(), 3u);
  const TensorInfo& a = f->tensor("a");
  EXPECT_EQ(a.dims, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(a.type, DType::F32);
  EXPECT_EQ(a.bytes, 32u);
  EXPECT_EQ(a.rows(), 2);
  float v;
  std::memcpy(&v, a.data + 4 * 5, 4);
  EXPECT_EQ(v, 1.5f);
  const TensorInfo& b = f->tensor("b");
  EXPECT_EQ(b.bytes, 34u);
  EXPECT_EQ(b.offset % 32, 0u);
  EXPECT_EQ(b.data[33], 7);
  EXPECT_EQ(f->tensor("c").bytes, 6u);
  EXPECT_EQ(f->tensor_bytes(), 32u + 34u + 6u);
  EXPECT_EQ(f->data_offset() % 32, 0u);
}

TEST(GgufReader, WriterReproducesTheFileByteForByte) {
  // Read the sample, write every value and tensor back, and compare the bytes.
  const auto bytes = sample_writer().to_bytes();
  const auto f = File::parse(bytes, "sample");
  Writer w;
  for (const auto& [key, value] : f->metadata()) w.set(key, value);
  for (const auto& t : f->tensors())
    w.add_tensor(t.name, t.dims, t.type, std::vector<uint8_t>(t.data, t.data + t.bytes));
  EXPECT_EQ(w.to_bytes(), bytes);
  EXPECT_EQ(w.file_size(), bytes.size());
}

TEST(GgufReader, HonoursGeneralAlignment) {
  Writer w;
  w.set_u32("general.alignment", 64);
  w.add_tensor("x", {5}, DType::F32, std::vector<uint8_t>(20, 0));
  w.add_tensor("y", {5}, DType::F32, std::vector<uint8_t>(20, 0));
  const auto bytes = w.to_bytes();
  const auto f = File::parse(bytes, "aligned");
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(f->tensor("y").offset, 64u);
}

TEST(GgufReader, TypedGettersNameTheKey) {
  const auto bytes = sample_writer().to_bytes();
  const auto f = File::parse(bytes, "sample");
  expect_error(ErrorCode::NotFound, "missing.key", [&] { f->get_uint("missing.key"); });
  expect_error(ErrorCode::Format, "'u32' is uint32, expected a string", [&] { f->get_string("u32"); });
  EXPECT_THROW(f->get_uint("i8"), Error);  // negative into unsigned
  EXPECT_THROW(f->get_int("u64"), Error);  // does not fit int64
  EXPECT_THROW(f->get_string_array("scores"), Error);
  EXPECT_THROW(f->tensor("nope"), Error);
  EXPECT_FALSE(f->get_uint_or("missing").has_value());
}

// Expects parse to throw a Format error whose message contains every fragment.
void expect_refused(const std::vector<uint8_t>& bytes, std::initializer_list<const char*> fragments) {
  try {
    File::parse(bytes, "bad");
    ADD_FAILURE() << "parse accepted a malformed file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Format) << e.what();
    for (const char* fragment : fragments)
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << "'" << fragment << "' not in: " << e.what();
  }
}

template <typename T>
void poke(std::vector<uint8_t>& bytes, size_t at, T value) {
  std::memcpy(bytes.data() + at, &value, sizeof value);
}

TEST(GgufReader, RefusesBadMagicAndVersion) {
  auto bytes = sample_writer().to_bytes();
  auto bad = bytes;
  bad[0] = 'X';
  expect_refused(bad, {"magic", "at byte 0"});
  bad = bytes;
  poke<uint32_t>(bad, 4, 7);
  expect_refused(bad, {"version", "at byte 4", "7"});
  expect_refused({'G', 'G'}, {"magic", "ends after 2"});
}

TEST(GgufReader, RefusesCountsThatCannotFit) {
  auto bytes = sample_writer().to_bytes();
  poke<uint64_t>(bytes, 8, 1ull << 60);
  expect_refused(bytes, {"tensor count", "at byte 8"});
  bytes = sample_writer().to_bytes();
  poke<uint64_t>(bytes, 16, 1ull << 60);
  expect_refused(bytes, {"metadata count", "at byte 16"});
}

TEST(GgufReader, RefusesStringLengthsPastTheEnd) {
  auto bytes = sample_writer().to_bytes();
  poke<uint64_t>(bytes, 24, 1ull << 40);  // the first key's length
  expect_refused(bytes, {"metadata key #0", "at byte 24", "runs past the end"});
}

// Builds a file with one tensor, then lets `mutate` change its tensor info.
std::vector<uint8_t> one_tensor_file(size_t* info_at) {
  Writer w;
  w.add_tensor("t", {64}, DType::Q8_0, std::vector<uint8_t>(68, 0));
  auto bytes = w.to_bytes();
  *info_at = 24 + 8 + 1;  // header, name length, name
  return bytes;
}

TEST(GgufReader, RefusesBadTensorInfos) {
  size_t at = 0;
  auto good = one_tensor_file(&at);
  ASSERT_NO_THROW(File::parse(good, "good"));

  auto bad = good;
  poke<uint32_t>(bad, at, 9);  // dimension count
  expect_refused(bad, {"tensor 't' dimension count", "9"});

  bad = good;
  poke<uint64_t>(bad, at + 4, 0);  // zero dimension
  expect_refused(bad, {"tensor 't' dimension 0", "zero"});

  bad = good;
  poke<uint64_t>(bad, at + 4, 48);  // not a whole Q8_0 block
  expect_refused(bad, {"block size 32"});

  bad = good;
  poke<uint32_t>(bad, at + 12, 99);  // tensor type
  expect_refused(bad, {"tensor 't' type", "unknown tensor type 99"});

  bad = good;
  poke<uint64_t>(bad, at + 16, 3);  // misaligned offset
  expect_refused(bad, {"tensor 't' offset", "not aligned"});

  bad = good;
  poke<uint64_t>(bad, at + 16, 1ull << 40);  // offset outside the file
  expect_refused(bad, {"tensor 't'", "outside the file"});

  bad = good;
  poke<uint64_t>(bad, at + 4, 1ull << 62);  // overflowing size
  expect_refused(bad, {"tensor 't'"});

  bad = good;
  bad.resize(File::parse(good, "good")->data_offset() + 67);  // data cut one byte short

  expect_refused(bad, {"tensor 't'", "outside the file"});
}

TEST(GgufReader, RefusesBadAlignmentAndDuplicates) {
  Writer w;
  w.set_u32("general.alignment", 48);
  expect_refused(w.to_bytes(), {"general.alignment", "48"});

  Writer dup;
  dup.add_tensor("t", {4}, DType::F32, std::vector<uint8_t>(16, 0));
  auto bytes = dup.to_bytes();
  // Two tensors named "t": duplicate the info and bump the count.
  Writer two;
  two.add_tensor("t", {4}, DType::F32, std::vector<uint8_t>(16, 0));
  two.add_tensor("u", {4}, DType::F32, std::vector<uint8_t>(16, 0));
  auto twice = two.to_bytes();
  const size_t second_name = 24 + 8 + 1 + 4 + 8 + 4 + 8 + 8;
  ASSERT_EQ(twice[second_name], 'u');
  twice[second_name] = 't';
  expect_refused(twice, {"tensor 't'", "appears twice"});
}

TEST(GgufReader, RefusesUnknownValueTypeAndBadBool) {
  Writer w;
  w.set_bool("b", true);
  auto bytes = w.to_bytes();
  const size_t type_at = 24 + 8 + 1;
  auto bad = bytes;
  poke<uint32_t>(bad, type_at, 13);
  expect_refused(bad, {"metadata 'b' type", "unknown value type 13"});
  bad = bytes;
  bad[type_at + 4] = 2;
  expect_refused(bad, {"metadata 'b'", "neither 0 nor 1"});
}

TEST(GgufReader, RefusesDeepNesting) {
  Array a;
  a.elem_type = ValueType::U8;
  for (int depth = 0; depth < 10; ++depth) {
    Array outer;
    outer.elem_type = ValueType::Array;
    outer.arrays.push_back(a);
    a = outer;
  }
  Writer w;
  w.set("deep", Value::array(a));
  expect_refused(w.to_bytes(), {"nested deeper"});
}

TEST(GgufReader, MissingFileIsNotFound) {
  expect_error(ErrorCode::NotFound, "/nonexistent/model.gguf", [] { File::open("/nonexistent/model.gguf"); });
}

}  // namespace
}  // namespace cellm::gguf
