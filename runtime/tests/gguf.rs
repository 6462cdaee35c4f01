//! GGUF reader tests on synthetic files built here with the crate's writer:
//! every value type round-trips, and every kind of damage is an error naming
//! where it is, never a panic.

use tiletune_runtime::LoadError;
use tiletune_runtime::gguf::write::GgufWriter;
use tiletune_runtime::gguf::{Array, GgmlType, GgufFile, Value};

fn all_types_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.kv("general.architecture", "llama")
        .kv("t.u8", 7u8)
        .kv("t.i8", -7i8)
        .kv("t.u16", 700u16)
        .kv("t.i16", -700i16)
        .kv("t.u32", 70_000u32)
        .kv("t.i32", -70_000i32)
        .kv("t.f32", 1.5f32)
        .kv("t.bool", true)
        .kv("t.string", "héllo")
        .kv("t.u64", u64::MAX)
        .kv("t.i64", i64::MIN)
        .kv("t.f64", -2.25f64)
        .kv("t.arr.u8", Array::U8(vec![1, 2, 3]))
        .kv("t.arr.i8", Array::I8(vec![-1, 2]))
        .kv("t.arr.u16", Array::U16(vec![1, 65535]))
        .kv("t.arr.i16", Array::I16(vec![-3]))
        .kv("t.arr.u32", Array::U32(vec![9, 10]))
        .kv("t.arr.i32", Array::I32(vec![-9]))
        .kv("t.arr.f32", Array::F32(vec![0.5, -0.5]))
        .kv("t.arr.bool", Array::Bool(vec![true, false]))
        .kv(
            "t.arr.string",
            Array::String(vec!["a".into(), "".into(), "ç".into()]),
        )
        .kv("t.arr.u64", Array::U64(vec![1 << 40]))
        .kv("t.arr.i64", Array::I64(vec![-(1 << 40)]))
        .kv("t.arr.f64", Array::F64(vec![1e300]))
        .kv("t.arr.empty", Array::U32(vec![]))
        .kv(
            "t.arr.nested",
            Array::Array(vec![
                Array::U32(vec![1, 2]),
                Array::Array(vec![Array::String(vec!["deep".into()])]),
            ]),
        );
    w
}

fn with_tensors(mut w: GgufWriter) -> GgufWriter {
    let vals: Vec<f32> = (0..12).map(|i| i as f32 * 0.25).collect();
    w.tensor_f32("a.weight", &[4, 3], &vals).unwrap();
    w.tensor("b.q4", &[64], GgmlType::Q4_0, (0..36).collect())
        .unwrap();
    w.tensor("c.q6k", &[256, 2], GgmlType::Q6_K, vec![7; 420])
        .unwrap();
    w
}

#[test]
fn every_value_type_round_trips() {
    for version in [2, 3] {
        let mut w = with_tensors(all_types_writer());
        w.version(version);
        let g = GgufFile::from_vec(w.to_bytes()).unwrap();
        assert_eq!(g.version(), version);
        assert_eq!(g.get("t.u8"), Some(&Value::U8(7)));
        assert_eq!(g.get("t.i8"), Some(&Value::I8(-7)));
        assert_eq!(g.get("t.u16"), Some(&Value::U16(700)));
        assert_eq!(g.get("t.i16"), Some(&Value::I16(-700)));
        assert_eq!(g.get_u32("t.u32").unwrap(), 70_000);
        assert_eq!(g.get("t.i32"), Some(&Value::I32(-70_000)));
        assert_eq!(g.get_f32("t.f32").unwrap(), 1.5);
        assert!(g.get_bool("t.bool").unwrap());
        assert_eq!(g.get_str("t.string").unwrap(), "héllo");
        assert_eq!(g.get_u64("t.u64").unwrap(), u64::MAX);
        assert_eq!(g.get("t.i64"), Some(&Value::I64(i64::MIN)));
        assert_eq!(g.get_f32("t.f64").unwrap(), -2.25);
        assert_eq!(g.get_array("t.arr.u8").unwrap(), &Array::U8(vec![1, 2, 3]));
        assert_eq!(g.get_array("t.arr.i8").unwrap(), &Array::I8(vec![-1, 2]));
        assert_eq!(
            g.get_array("t.arr.u16").unwrap(),
            &Array::U16(vec![1, 65535])
        );
        assert_eq!(g.get_array("t.arr.i16").unwrap(), &Array::I16(vec![-3]));
        assert_eq!(g.get_array("t.arr.u32").unwrap(), &Array::U32(vec![9, 10]));
        assert_eq!(g.get_array("t.arr.i32").unwrap(), &Array::I32(vec![-9]));
        assert_eq!(
            g.get_array("t.arr.f32").unwrap(),
            &Array::F32(vec![0.5, -0.5])
        );
        assert_eq!(
            g.get_array("t.arr.bool").unwrap(),
            &Array::Bool(vec![true, false])
        );
        assert_eq!(
            g.get_array("t.arr.string").unwrap(),
            &Array::String(vec!["a".into(), "".into(), "ç".into()])
        );
        assert_eq!(
            g.get_array("t.arr.u64").unwrap(),
            &Array::U64(vec![1 << 40])
        );
        assert_eq!(
            g.get_array("t.arr.i64").unwrap(),
            &Array::I64(vec![-(1 << 40)])
        );
        assert_eq!(g.get_array("t.arr.f64").unwrap(), &Array::F64(vec![1e300]));
        assert!(g.get_array("t.arr.empty").unwrap().is_empty());
        let nested = g.get_array("t.arr.nested").unwrap();
        assert_eq!(nested.elem_type().name(), "array");
        assert_eq!(nested.len(), 2);
        assert_eq!(g.metadata().len(), 27);
        assert_eq!(g.metadata()[0].0, "general.architecture");
    }
}

#[test]
fn getters_report_missing_and_mistyped_keys() {
    let g = GgufFile::from_vec(all_types_writer().to_bytes()).unwrap();
    assert!(matches!(
        g.get_str("nope"),
        Err(LoadError::MissingKey { .. })
    ));
    let e = g.get_str("t.u32").unwrap_err();
    assert!(
        matches!(
            e,
            LoadError::WrongType {
                expected: "string",
                found: "u32",
                ..
            }
        ),
        "{e}"
    );
    // Integer getters accept any integer type that fits, and nothing else.
    assert_eq!(g.get_u32("t.u8").unwrap(), 7);
    assert!(g.get_u32("t.i8").is_err());
    assert!(g.get_u32("t.u64").is_err());
    assert!(g.get_bool("t.u8").is_err());
    assert!(g.get_array("t.string").is_err());
}

#[test]
fn tensors_are_located_and_sized() {
    let mut w = with_tensors(all_types_writer());
    w.alignment(64);
    let bytes = w.to_bytes();
    let g = GgufFile::from_vec(bytes).unwrap();
    assert_eq!(g.alignment(), 64);
    assert_eq!(g.data_offset() % 64, 0);
    assert_eq!(g.tensors().len(), 3);
    let (info, data) = g.tensor_data("a.weight").unwrap();
    assert_eq!(info.dims, [4, 3]);
    assert_eq!(info.ggml_type, GgmlType::F32);
    assert_eq!(info.n_elements(), 12);
    let vals: Vec<f32> = data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(vals[5], 1.25);
    let (info, data) = g.tensor_data("b.q4").unwrap();
    assert_eq!((info.size, info.offset % 64), (36, 0));
    assert_eq!(data, (0..36).collect::<Vec<u8>>());
    let (info, data) = g.tensor_data("c.q6k").unwrap();
    assert_eq!(info.size, 420);
    assert!(data.iter().all(|&b| b == 7));
    let e = g.tensor_data("missing").unwrap_err();
    assert!(matches!(e, LoadError::MissingTensor { .. }));
}

#[test]
fn open_reads_a_file_and_reports_io_errors() {
    let dir = std::env::temp_dir().join(format!("tiletune-gguf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("m.gguf");
    with_tensors(all_types_writer()).write(&path).unwrap();
    let g = GgufFile::open(&path).unwrap();
    assert_eq!(g.path(), path);
    assert_eq!(g.tensor_data("b.q4").unwrap().1.len(), 36);
    let e = GgufFile::open(dir.join("absent.gguf")).unwrap_err();
    assert!(matches!(e, LoadError::Io { .. }));
    assert!(e.to_string().contains("absent.gguf"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = with_tensors(all_types_writer()).to_bytes();
    for len in 0..bytes.len() {
        // The trailing padding after the last tensor is not needed.
        let r = GgufFile::from_bytes(&bytes[..len]);
        let last_end = {
            let g = GgufFile::from_bytes(&bytes).unwrap();
            g.tensors()
                .iter()
                .map(|t| g.data_offset() + t.offset + t.size)
                .max()
                .unwrap()
        };
        if (len as u64) < last_end {
            assert!(r.is_err(), "prefix of {len} bytes parsed");
        }
    }
}

/// Header with `n_tensors`, `n_kv` then `rest`.
fn raw(version: u32, n_tensors: u64, n_kv: u64, rest: &[u8]) -> Vec<u8> {
    let mut v = b"GGUF".to_vec();
    v.extend_from_slice(&version.to_le_bytes());
    v.extend_from_slice(&n_tensors.to_le_bytes());
    v.extend_from_slice(&n_kv.to_le_bytes());
    v.extend_from_slice(rest);
    v
}

fn kv_bytes(key: &str, ty: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = (key.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(key.as_bytes());
    v.extend_from_slice(&ty.to_le_bytes());
    v.extend_from_slice(payload);
    v
}

fn tensor_info_bytes(name: &str, dims: &[u64], ty: u32, offset: u64) -> Vec<u8> {
    let mut v = (name.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(name.as_bytes());
    v.extend_from_slice(&(dims.len() as u32).to_le_bytes());
    for d in dims {
        v.extend_from_slice(&d.to_le_bytes());
    }
    v.extend_from_slice(&ty.to_le_bytes());
    v.extend_from_slice(&offset.to_le_bytes());
    v
}

#[test]
fn header_damage_is_reported() {
    let e = GgufFile::from_bytes(b"GGML\x03\0\0\0").unwrap_err();
    assert!(matches!(e, LoadError::BadMagic { .. }), "{e}");
    for v in [0, 1, 4, 0x0300_0000] {
        let e = GgufFile::from_bytes(&raw(v, 0, 0, &[])).unwrap_err();
        assert!(matches!(e, LoadError::UnsupportedVersion { .. }), "{e}");
    }
    assert!(GgufFile::from_bytes(&raw(3, 0, 0, &[])).is_ok());
    // Hostile counts fail fast instead of allocating.
    for (nt, nk) in [(u64::MAX, 0), (0, u64::MAX), (1 << 40, 1 << 40)] {
        let e = GgufFile::from_bytes(&raw(3, nt, nk, &[0; 64])).unwrap_err();
        assert!(matches!(e, LoadError::Malformed { .. }), "{e}");
    }
}

#[test]
fn metadata_damage_is_reported() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (kv_bytes("k", 13, &[0; 8]), "unknown value type"),
        (kv_bytes("k", 7, &[2]), "bool value 2"),
        // String length far beyond the file.
        (kv_bytes("k", 8, &u64::MAX.to_le_bytes()), "truncated"),
        // Array of u64::MAX u32s.
        (
            kv_bytes(
                "k",
                9,
                &[&4u32.to_le_bytes()[..], &u64::MAX.to_le_bytes()].concat(),
            ),
            "cannot fit",
        ),
        // Array with an unknown element type.
        (
            kv_bytes(
                "k",
                9,
                &[&99u32.to_le_bytes()[..], &1u64.to_le_bytes()].concat(),
            ),
            "unknown element type",
        ),
        // general.alignment that is not a power of two, or zero.
        (
            kv_bytes("general.alignment", 4, &3u32.to_le_bytes()),
            "power-of-two",
        ),
        (
            kv_bytes("general.alignment", 4, &0u32.to_le_bytes()),
            "power-of-two",
        ),
        (
            kv_bytes(
                "general.alignment",
                8,
                &[&1u64.to_le_bytes()[..], b"x"].concat(),
            ),
            "power-of-two",
        ),
    ];
    for (kv, want) in cases {
        let mut body = kv.clone();
        body.extend_from_slice(&[0; 16]);
        let e = GgufFile::from_bytes(&raw(3, 0, 1, &body))
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "want {want:?} in {e:?}");
    }
    // Arrays nested past the depth limit.
    let mut nested = Vec::new();
    for _ in 0..20 {
        nested.extend_from_slice(&9u32.to_le_bytes());
        nested.extend_from_slice(&1u64.to_le_bytes());
    }
    nested.extend_from_slice(&[0; 256]);
    let e = GgufFile::from_bytes(&raw(3, 0, 1, &kv_bytes("k", 9, &nested))).unwrap_err();
    assert!(e.to_string().contains("nested"), "{e}");
    // Duplicate keys.
    let mut two = kv_bytes("k", 4, &1u32.to_le_bytes());
    two.extend(kv_bytes("k", 4, &2u32.to_le_bytes()));
    let e = GgufFile::from_bytes(&raw(3, 0, 2, &two)).unwrap_err();
    assert!(e.to_string().contains("duplicate"), "{e}");
}

/// A one-tensor file with the given info and `data_len` bytes of data.
fn one_tensor(info: Vec<u8>, data_len: usize) -> Vec<u8> {
    let mut v = raw(3, 1, 0, &info);
    v.resize(v.len().next_multiple_of(32) + data_len, 0);
    v
}

#[test]
fn tensor_damage_is_reported() {
    assert!(GgufFile::from_bytes(&one_tensor(tensor_info_bytes("w", &[8], 0, 0), 32)).is_ok());
    let e =
        GgufFile::from_bytes(&one_tensor(tensor_info_bytes("w.bad", &[8], 4, 0), 32)).unwrap_err();
    assert!(
        matches!(e, LoadError::UnknownTensorType { ref tensor, type_id: 4, .. } if tensor == "w.bad"),
        "{e}"
    );
    assert!(e.to_string().contains("w.bad"));
    let e =
        GgufFile::from_bytes(&one_tensor(tensor_info_bytes("w", &[8], 1000, 0), 32)).unwrap_err();
    assert!(matches!(
        e,
        LoadError::UnknownTensorType { type_id: 1000, .. }
    ));

    let cases: Vec<(Vec<u8>, &str)> = vec![
        (tensor_info_bytes("w", &[1, 1, 1, 1, 1], 0, 0), "5 dims"),
        (
            tensor_info_bytes("w", &[1 << 32, 1 << 32], 0, 0),
            "overflow",
        ),
        (tensor_info_bytes("w", &[u64::MAX], 0, 0), "overflow"),
        (tensor_info_bytes("w", &[33], 2, 0), "block size"),
        (
            tensor_info_bytes("w", &[8], 0, 4),
            "not a multiple of the alignment",
        ),
        (tensor_info_bytes("w", &[64], 0, 0), "truncated"),
        (tensor_info_bytes("w", &[8], 0, u64::MAX - 31), "truncated"),
        (tensor_info_bytes("w", &[1 << 40], 0, 0), "truncated"),
    ];
    for (info, want) in cases {
        let e = GgufFile::from_bytes(&one_tensor(info, 32))
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "want {want:?} in {e:?}");
    }
    let mut two = tensor_info_bytes("w", &[8], 0, 0);
    two.extend(tensor_info_bytes("w", &[8], 0, 32));
    let mut v = raw(3, 2, 0, &two);
    v.resize(v.len().next_multiple_of(32) + 64, 0);
    let e = GgufFile::from_bytes(&v).unwrap_err();
    assert!(e.to_string().contains("duplicate tensor"), "{e}");
}

/// Overlapping data ranges are refused at open, naming both tensors; tensors
/// out of info order, back to back, are fine.
#[test]
fn overlapping_tensors_are_refused() {
    let file = |infos: &[(&str, u64, u64)]| {
        let mut bytes = Vec::new();
        for (name, elems, offset) in infos {
            bytes.extend(tensor_info_bytes(name, &[*elems], 0, *offset));
        }
        let mut v = raw(3, infos.len() as u64, 0, &bytes);
        v.resize(v.len().next_multiple_of(32) + 256, 0);
        v
    };
    // 16 f32 = 64 bytes each.
    assert!(GgufFile::from_bytes(&file(&[("a", 16, 64), ("b", 16, 0)])).is_ok());
    let e = GgufFile::from_bytes(&file(&[("a", 16, 0), ("b", 16, 32)]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`b`") && e.contains("overlaps tensor `a`"),
        "{e}"
    );
    // One tensor inside another, listed first.
    let e = GgufFile::from_bytes(&file(&[("inner", 8, 32), ("outer", 32, 0)]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`inner`") && e.contains("overlaps tensor `outer`"),
        "{e}"
    );
}
