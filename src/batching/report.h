#pragma once
// The JSON report of a run (DESIGN.md §6): per generation text, tokens, finish reason and
// timings; the KV pool (rows, live and peak cells, bytes per cell, allocated bytes, growths);
// weights and memory (resident, device before/after load, peak); steps; graph captures.
#include <nlohmann/json.hpp>
#include <vector>

#include "batching/engine.h"
#include "batching/generation.h"

namespace cellm::batching {

nlohmann::json generation_json(const GenerationResult& result);
// Everything about the engine itself (kv, weights_bytes, memory, steps, graphs, options).
nlohmann::json engine_json(Engine& engine);

}  // namespace cellm::batching
