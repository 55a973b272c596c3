// Mixture-of-experts on the CPU: the router's choice and the experts'
// products, the reference the CUDA kernels will be held to (ops::moe_mlp).
#pragma once

#include <cstdint>

namespace troupe {

// One token's routing: softmax over the `num_experts` router logits (in
// float32), the `top_k` largest probabilities (equal ones: the lower expert
// first, as torch.topk), renormalised to sum 1 when `renormalize`. ids and
// weights get top_k entries, in descending order of weight.
void moe_route(const float* logits, int64_t num_experts, int64_t top_k, bool renormalize, int32_t* ids,
               float* weights);

// out[n, h] = sum over each token's routed experts of weight *
// down_e(silu(gate_e x) * up_e x). gate_up is [E * 2I, h] (expert e's gate
// rows at e * 2I, its up rows at e * 2I + I), down [E * h, I]; tokens are
// grouped by expert so that each expert runs one GEMM over its tokens.
// With `counts`, each token whose token_slots entry is >= 0 (each token
// when token_slots is null) adds one to counts[e] per expert e it is routed
// to (wrapping; ops.h moe_counts).
void moe_mlp_f32(const float* x, int64_t n, int64_t h, const float* router_logits, const float* gate_up,
                 const float* down, int64_t num_experts, int64_t inter, int64_t top_k, bool renormalize,
                 float* out, int64_t out_stride, uint32_t* counts = nullptr,
                 const int32_t* token_slots = nullptr);

}  // namespace troupe
