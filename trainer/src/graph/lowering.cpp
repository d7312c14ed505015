// The lowering's walk and slot bookkeeping; the per-layer decisions are the rules in layers.cpp.
#include "lowering.hpp"

#include <utility>

#include <stoker/core/error.hpp>
#include <stoker/trainer/tensor.hpp>

#include "layers.hpp"

namespace stoker::trainer::detail {

Lowering::Lowering(const Graph& g, const LoweringOptions& options)
    : g_(g),
      options_(options),
      consumers_(g.nodes.size(), 0),
      last_reader_(g.nodes.size(), -1),
      slot_of_(g.nodes.size(), -1),
      producer_(g.nodes.size(), -1),
      readers_(g.nodes.size(), 0),
      padding_folded_(g.nodes.size(), false) {
  for (std::size_t id = 0; id < g.nodes.size(); ++id) {
    for (int i : g.nodes[id].inputs) {
      ++consumers_[at(i)];
      last_reader_[at(i)] = static_cast<int>(id);
    }
  }
  for (int o : g.outputs) ++consumers_[at(o)];
  out_.slot_size.assign(g.nodes.size(), 0);
}

const std::vector<int>& Lowering::input_shape(int id, std::size_t k) const {
  const LayerNode& n = node(id);
  return n.inputs.empty() ? n.out_shape : node(n.inputs.at(k)).out_shape;
}

int Lowering::only_reader(int id) const { return consumers_[at(id)] == 1 ? last_reader_[at(id)] : -1; }

LoweredOp* Lowering::fusable_producer(int slot) {
  const int p = producer_[at(slot)];
  if (p < 0 || readers_[at(slot)] != 1) return nullptr;
  LoweredOp& op = out_.ops[at(p)];
  return op.act.is_linear() ? &op : nullptr;
}

void Lowering::set_input(int id) {
  slot_of_[at(id)] = id;
  out_.slot_size[at(id)] = Tensor::element_count(node(id).out_shape);
  readers_[at(id)] = consumers_[at(id)];
  out_.input_slot = id;
  out_.input_shape = node(id).out_shape;
}

void Lowering::alias(int id, int slot) {
  slot_of_[at(id)] = slot;
  readers_[at(slot)] += consumers_[at(id)] - 1;
}

void Lowering::fold_padding(int id) {
  padding_folded_[at(id)] = true;
  alias(id, input_slot(id, 0));
}

LoweredOp& Lowering::emit(OpKind kind, int id) {
  const LayerNode& n = node(id);
  LoweredOp op;
  op.kind = kind;
  op.name = n.name;
  for (std::size_t k = 0; k < n.inputs.size(); ++k) op.in.push_back(input_slot(id, k));
  op.out = id;
  const std::vector<int>& in = input_shape(id);
  if (in.size() == 3) op.h = in[0], op.w = in[1];
  op.c = in.back();
  if (n.out_shape.size() == 3) op.oh = n.out_shape[0], op.ow = n.out_shape[1];
  op.oc = n.out_shape.back();

  slot_of_[at(id)] = id;
  out_.slot_size[at(id)] = Tensor::element_count(n.out_shape);
  readers_[at(id)] = consumers_[at(id)];
  producer_[at(id)] = static_cast<int>(out_.ops.size());
  out_.ops.push_back(std::move(op));
  return out_.ops.back();
}

LoweredOp& Lowering::emit_inner(OpKind kind, int id, const std::vector<int>& out_shape) {
  const LayerNode& n = node(id);
  LoweredOp op;
  op.kind = kind;
  op.name = n.name;
  for (std::size_t k = 0; k < n.inputs.size(); ++k) op.in.push_back(input_slot(id, k));
  const std::vector<int>& in = input_shape(id);
  if (in.size() == 3) op.h = in[0], op.w = in[1];
  op.c = in.back();
  if (out_shape.size() == 3) op.oh = out_shape[0], op.ow = out_shape[1];
  op.oc = out_shape.back();
  op.out = static_cast<int>(out_.slot_size.size());
  out_.slot_size.push_back(Tensor::element_count(out_shape));
  readers_.push_back(1);
  producer_.push_back(static_cast<int>(out_.ops.size()));
  out_.ops.push_back(std::move(op));
  return out_.ops.back();
}

LoweredGraph Lowering::finish() && {
  for (int o : g_.outputs) {
    out_.outputs.push_back(slot_of_[at(o)]);
    out_.output_shapes.push_back(node(o).out_shape);
  }
  return std::move(out_);
}

LoweredGraph lower(const Graph& g, const LoweringOptions& options) {
  if (g.inputs.size() != 1)
    throw InvalidArgument(options.backend + ": model '" + g.name + "' has " + std::to_string(g.inputs.size()) +
                          " inputs; only single-input models are supported");
  Lowering lowering(g, options);
  for (std::size_t id = 0; id < g.nodes.size(); ++id) {
    const LayerNode& node = g.nodes[id];
    const LayerRule* rule = layer_rule(node.kind);
    if (!rule)
      throw InvalidArgument(options.backend + ": layer '" + node.name + "' (" +
                            (node.keras_class.empty() ? std::string(to_string(node.kind)) : node.keras_class) +
                            ") is not supported");
    rule->lower(lowering, static_cast<int>(id));
  }
  return std::move(lowering).finish();
}

}  // namespace stoker::trainer::detail
