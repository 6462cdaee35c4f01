//! The runtime's fast decoder as `llama-bench`'s test schedule
//! (`tiletune_bench::peers::llama_bench`) sees it: what `tiletune bench
//! model` and the model-level check of `tune --model` time.

use crate::FlowError;
use tiletune_bench::peers::llama_bench::TestModel;
use tiletune_runtime::models::{FastModel, RunState};

/// A model under llama-bench's tests: prompt batches and generation steps
/// are forward passes whose logits are not read.
pub struct BenchModel<'m>(pub &'m FastModel);

impl TestModel for BenchModel<'_> {
    type State = RunState;
    type Error = FlowError;
    fn reset(&self, st: &mut RunState) {
        st.reset();
    }
    fn prompt_batch(&self, tokens: &[u32], st: &mut RunState) -> Result<(), FlowError> {
        self.0
            .forward(tokens, st, false)
            .map_err(|source| FlowError::Step {
                step: "prompt batch",
                source,
            })?;
        Ok(())
    }
    fn gen_step(&self, token: u32, st: &mut RunState) -> Result<(), FlowError> {
        self.0
            .forward(&[token], st, false)
            .map_err(|source| FlowError::Step {
                step: "generation step",
                source,
            })?;
        Ok(())
    }
}
