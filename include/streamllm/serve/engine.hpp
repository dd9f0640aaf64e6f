// What the API service needs of the model behind it, with no model shape in
// its type. The service's routing, JSON and streaming, and an HTTP binding
// above them, are then compiled once in a program that serves any of several
// shapes; only the scheduler under this interface is compiled per shape.
// One virtual call per request or statistic: nothing per token.
#pragma once

#include <chrono>
#include <cstddef>

#include "streamllm/core/config.hpp"
#include "streamllm/generation/scheduler.hpp"

namespace streamllm::serve {

class Engine {
 public:
  virtual ~Engine() = default;

  virtual ModelShape shape() const = 0;
  // As BatchScheduler::submit, with a cache the scheduler finds or makes.
  virtual SequenceId submit(SequenceRequest r) = 0;
  virtual void cancel(SequenceId id) = 0;
  virtual void start() = 0;
  virtual void drain(std::chrono::milliseconds grace) = 0;
  virtual void stop() = 0;

  virtual std::size_t active() const = 0;
  virtual std::size_t waiting() const = 0;
  virtual std::size_t pool_bytes() const = 0;
  virtual std::size_t pool_entries() const = 0;
};

// The engine of one model shape: its continuous-batching scheduler.
template <class Config>
class BatchEngine final : public Engine {
 public:
  BatchEngine(Llama<Config>& model, const Tokenizer& tok, SchedulerOptions opt) : scheduler_(model, tok, std::move(opt)) {}

  ModelShape shape() const override { return Config::shape(); }
  SequenceId submit(SequenceRequest r) override {
    typename BatchScheduler<Config>::Request full;
    static_cast<SequenceRequest&>(full) = std::move(r);
    return scheduler_.submit(std::move(full));
  }
  void cancel(SequenceId id) override { scheduler_.cancel(id); }
  void start() override { scheduler_.start(); }
  void drain(std::chrono::milliseconds grace) override { scheduler_.drain(grace); }
  void stop() override { scheduler_.stop(); }

  std::size_t active() const override { return scheduler_.active(); }
  std::size_t waiting() const override { return scheduler_.waiting(); }
  std::size_t pool_bytes() const override { return scheduler_.pool_bytes(); }
  std::size_t pool_entries() const override { return scheduler_.pool_entries(); }

 private:
  BatchScheduler<Config> scheduler_;
};

}  // namespace streamllm::serve
