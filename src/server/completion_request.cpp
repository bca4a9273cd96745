#include "server/completion_request.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace cellm::server {
namespace {

using nlohmann::json;

constexpr size_t kMaxStopStrings = 4;  // OpenAI's limit

// A value quoted in an error message: an array or object is only named, since dumping one
// recurses as deep as the client nested it (a 16 MB body of brackets overflows the stack).
std::string quoted(const json& value) { return value.is_structured() ? value.type_name() : value.dump(); }

// Typed access to the fields of the request object. A field that is absent or null reads as
// "not given", as the OpenAI API treats null.
class Fields {
 public:
  explicit Fields(const json& object) : object_(object) {}

  const json* find(const std::string& name) const {
    auto it = object_.find(name);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  std::optional<double> number(const std::string& name, double lo, double hi) const {
    const json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_number()) reject_field(name, "'", name, "' must be a number, got ", v->type_name());
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
      reject_field(name, "'", name, "' must be between ", lo, " and ", hi, ", got ", v->dump());
    return x;
  }

  std::optional<int64_t> integer(const std::string& name, int64_t lo, int64_t hi) const {
    const json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) reject_field(name, "'", name, "' must be an integer, got ", v->type_name());
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi))
      reject_field(name, "'", name, "' must be at most ", hi, ", got ", v->dump());
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) reject_field(name, "'", name, "' must be between ", lo, " and ", hi, ", got ", x);
    return x;
  }

  std::optional<bool> boolean(const std::string& name) const {
    const json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) reject_field(name, "'", name, "' must be a boolean, got ", v->type_name());
    return v->get<bool>();
  }

  std::optional<std::string> string(const std::string& name) const {
    const json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_string()) reject_field(name, "'", name, "' must be a string, got ", v->type_name());
    return v->get<std::string>();
  }

 private:
  const json& object_;
};

std::string message_text(const json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) reject_field(param, "'", param, "' must be a string or an array of text parts");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string where = str_cat(param, "[", i, "]");
    if (!part.is_object()) reject_field(where, "'", where, "' must be an object");
    const auto type = part.find("type");
    if (type == part.end() || !type->is_string()) reject_field(where + ".type", "'", where, ".type' must be a string");
    if (*type != "text")
      reject_field(where + ".type", "content part type '", type->get<std::string>(), "' is not supported (only 'text')");
    const auto part_text = part.find("text");
    if (part_text == part.end() || !part_text->is_string())
      reject_field(where + ".text", "'", where, ".text' must be a string");
    text += part_text->get<std::string>();
  }
  return text;
}

std::vector<tokenizer::ChatMessage> parse_messages(const Fields& fields) {
  const json* messages = fields.find("messages");
  if (!messages) reject_field("messages", "'messages' is required");
  if (!messages->is_array()) reject_field("messages", "'messages' must be an array, got ", messages->type_name());
  if (messages->empty()) reject_field("messages", "'messages' must hold at least one message");
  std::vector<tokenizer::ChatMessage> out;
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string where = str_cat("messages[", i, "]");
    if (!m.is_object()) reject_field(where, "'", where, "' must be an object, got ", m.type_name());
    const Fields message(m);
    const std::optional<std::string> role = message.string("role");
    if (!role) reject_field(where + ".role", "'", where, ".role' is required");
    tokenizer::ChatMessage chat;
    if (*role == "system" || *role == "developer") chat.role = "system";
    else if (*role == "user" || *role == "assistant") chat.role = *role;
    else reject_field(where + ".role", "role '", *role, "' is not supported (system, developer, user, assistant)");
    const json* content = message.find("content");
    if (content) chat.content = message_text(*content, where + ".content");
    else if (chat.role != "assistant") reject_field(where + ".content", "'", where, ".content' is required");
    out.push_back(std::move(chat));
  }
  return out;
}

void parse_prompt(const Fields& fields, CompletionRequest& r) {
  const json* prompt = fields.find("prompt");
  if (!prompt) reject_field("prompt", "'prompt' is required");
  const json* p = prompt;
  // One prompt per request: a list may hold a single string or a single token list.
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    r.prompt = p->get<std::string>();
    if (r.prompt.empty()) reject_field("prompt", "'prompt' is empty");
    return;
  }
  if (!p->is_array())
    reject_field("prompt", "'prompt' must be a string or an array of token ids, got ", p->type_name());
  if (p->empty()) reject_field("prompt", "'prompt' is empty");
  for (const json& t : *p) {
    if (t.is_string()) reject_field("prompt", "one prompt per request: 'prompt' may hold one string, not several");
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max())
      reject_field("prompt", "'prompt' token ids must be non-negative integers, got ", quoted(t));
    r.prompt_tokens.push_back(t.get<int32_t>());
  }
}

std::vector<std::string> parse_stop(const Fields& fields) {
  const json* stop = fields.find("stop");
  if (!stop) return {};
  std::vector<std::string> out;
  if (stop->is_string()) {
    out.push_back(stop->get<std::string>());
  } else if (stop->is_array()) {
    if (stop->size() > kMaxStopStrings)
      reject_field("stop", "'stop' holds ", stop->size(), " strings; at most ", kMaxStopStrings, " are allowed");
    for (const json& s : *stop) {
      if (!s.is_string()) reject_field("stop", "'stop' must hold strings, got ", s.type_name());
      out.push_back(s.get<std::string>());
    }
  } else {
    reject_field("stop", "'stop' must be a string or an array of strings, got ", stop->type_name());
  }
  for (const std::string& s : out)
    if (s.empty()) reject_field("stop", "'stop' strings must not be empty");
  return out;
}

void parse_sampling(const Fields& fields, batching::SamplingParams& s) {
  s.temperature = 1.0f;  // OpenAI's default; 0 is greedy
  if (auto t = fields.number("temperature", 0, 2)) s.temperature = static_cast<float>(*t);
  if (auto p = fields.number("top_p", 0, 1)) {
    // top_p 0 keeps only the most likely token, which is greedy decoding; so does a top_p
    // that rounds to 0 as a float (1e-50), which the sampler would refuse.
    if (static_cast<float>(*p) == 0) s.temperature = 0;
    else s.top_p = static_cast<float>(*p);
  }
  if (auto k = fields.integer("top_k", 0, std::numeric_limits<int32_t>::max())) s.top_k = static_cast<int32_t>(*k);
  if (auto m = fields.number("min_p", 0, 1)) s.min_p = static_cast<float>(*m);
  if (auto r = fields.number("repeat_penalty", 0, 100)) {
    // Checked as the float the sampler gets: 1e-50 rounds to 0.
    if (static_cast<float>(*r) <= 0) reject_field("repeat_penalty", "'repeat_penalty' must be > 0");
    s.repeat_penalty = static_cast<float>(*r);
  }
  if (auto seed = fields.integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()))
    s.seed = static_cast<uint64_t>(*seed);
}

// Fields whose non-default values ask for something cellm does not do: refusing them beats
// silently answering a different question.
void refuse_unsupported(const Fields& fields, Endpoint endpoint) {
  if (auto n = fields.integer("n", 1, 128); n && *n != 1) reject_field("n", "'n' must be 1: one choice per request");
  if (auto b = fields.integer("best_of", 1, 128); b && *b != 1) reject_field("best_of", "'best_of' must be 1");
  if (endpoint == Endpoint::ChatCompletions) {
    if (fields.boolean("logprobs").value_or(false)) reject_field("logprobs", "'logprobs' is not supported");
  } else if (const json* lp = fields.find("logprobs"); lp && !(lp->is_number_integer() && lp->get<int64_t>() == 0)) {
    reject_field("logprobs", "'logprobs' is not supported");
  }
  if (fields.find("top_logprobs")) reject_field("top_logprobs", "'top_logprobs' is not supported");
  if (fields.boolean("echo").value_or(false)) reject_field("echo", "'echo' is not supported");
  if (auto suffix = fields.string("suffix"); suffix && !suffix->empty())
    reject_field("suffix", "'suffix' is not supported");
  for (const char* name : {"tools", "functions"})
    if (const json* v = fields.find(name); v && !(v->is_array() && v->empty()))
      reject_field(name, "'", name, "' (tool calling) is not supported");
  if (const json* bias = fields.find("logit_bias"); bias && !(bias->is_object() && bias->empty()))
    reject_field("logit_bias", "'logit_bias' is not supported");
  if (const json* format = fields.find("response_format")) {
    if (!format->is_object()) reject_field("response_format", "'response_format' must be an object");
    const auto type = format->find("type");
    if (type != format->end() && *type != "text")
      reject_field("response_format", "'response_format' type ", quoted(*type), " is not supported (only \"text\")");
  }
  // Accepted for compatibility, without effect.
  fields.number("presence_penalty", -2, 2);
  fields.number("frequency_penalty", -2, 2);
  fields.string("user");
}

}  // namespace

const char* endpoint_path(Endpoint endpoint) {
  return endpoint == Endpoint::ChatCompletions ? "/v1/chat/completions" : "/v1/completions";
}

CompletionRequest parse_completion_request(Endpoint endpoint, std::string_view body) {
  json root;
  try {
    root = json::parse(body);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e99999
    throw ApiError(400, "invalid_request_error", str_cat("the request body is not valid JSON: ", e.what()));
  }
  if (!root.is_object())
    throw ApiError(400, "invalid_request_error", str_cat("the request body must be a JSON object, got ", root.type_name()));
  const Fields fields(root);
  CompletionRequest r;
  r.endpoint = endpoint;
  r.model = fields.string("model").value_or("");
  if (endpoint == Endpoint::ChatCompletions) r.messages = parse_messages(fields);
  else parse_prompt(fields, r);

  constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();
  std::optional<int64_t> max_tokens = fields.integer("max_tokens", 1, kMaxInt32);
  // The chat API's newer name for the same limit.
  if (endpoint == Endpoint::ChatCompletions && !max_tokens) max_tokens = fields.integer("max_completion_tokens", 1, kMaxInt32);
  if (max_tokens) r.max_tokens = static_cast<int32_t>(*max_tokens);

  parse_sampling(fields, r.sampling);
  r.stop = parse_stop(fields);
  r.stream = fields.boolean("stream").value_or(false);
  if (const json* options = fields.find("stream_options")) {
    if (!options->is_object()) reject_field("stream_options", "'stream_options' must be an object");
    if (!r.stream) reject_field("stream_options", "'stream_options' is only allowed with 'stream': true");
    if (const auto usage = options->find("include_usage"); usage != options->end() && !usage->is_null()) {
      if (!usage->is_boolean())
        reject_field("stream_options.include_usage", "'stream_options.include_usage' must be a boolean, got ",
                     usage->type_name());
      r.include_usage = usage->get<bool>();
    }
  }
  refuse_unsupported(fields, endpoint);
  return r;
}

}  // namespace cellm::server
