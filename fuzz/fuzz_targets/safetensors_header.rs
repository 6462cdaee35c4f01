//! Feeds arbitrary bytes to the safetensors reader (8-byte length, JSON
//! header, data) and reads every tensor it lists: any panic is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tiletune_runtime::safetensors::SafetensorsFile;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = SafetensorsFile::from_vec(data.to_vec()) {
        let names: Vec<String> = f.tensors().iter().map(|t| t.name.clone()).collect();
        for name in &names {
            let (info, bytes) = f.tensor(name).expect("a listed tensor is readable");
            assert!(
                bytes.len() <= data.len(),
                "{} reads past the file",
                info.name
            );
            let _ = f.tensor_f32(name);
        }
        let _ = f.metadata();
    }
});
