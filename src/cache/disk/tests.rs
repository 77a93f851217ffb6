use super::*;

fn stored(body: &str, vary: &[(&str, Option<&str>)]) -> Stored {
    let headers = vec![
        (
            Bytes::from_static(b"content-type"),
            Bytes::from_static(b"text/plain"),
        ),
        (
            Bytes::from_static(b"cache-control"),
            Bytes::from_static(b"max-age=60"),
        ),
    ];
    Stored {
        status: 200,
        control: policy::response_control(&headers),
        headers,
        body: Bytes::copy_from_slice(body.as_bytes()),
        trailers: Vec::new(),
        timing: Timing {
            request_time: 100,
            response_time: 101,
            initial_age: 2,
        },
        lifetime: 60,
        vary: vary
            .iter()
            .map(|(n, v)| {
                (
                    Bytes::copy_from_slice(n.as_bytes()),
                    v.map(|v| Bytes::copy_from_slice(v.as_bytes())),
                )
            })
            .collect(),
        live: Default::default(),
    }
}

fn none(_: &[u8]) -> Option<Bytes> {
    None
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for sub in fs::read_dir(dir).expect("dir").flatten() {
        if sub.path().is_dir() {
            out.extend(
                fs::read_dir(sub.path())
                    .expect("sub")
                    .flatten()
                    .map(|f| f.path()),
            );
        } else {
            out.push(sub.path());
        }
    }
    out
}

#[test]
fn a_response_survives_a_reopen_and_variants_stay_apart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = Bytes::from_static(b"http://h/a");
    {
        let disk = Disk::open(dir.path(), 1 << 20).expect("open");
        assert!(disk.write(&key, &stored("english", &[("accept-language", Some("en"))])));
        assert!(disk.write(&key, &stored("none", &[("accept-language", None)])));
        assert_eq!(disk.len(), 2);
    }
    let disk = Disk::open(dir.path(), 1 << 20).expect("reopen");
    assert_eq!(disk.len(), 2);
    let en = |n: &[u8]| (n == b"accept-language").then(|| Bytes::from_static(b"en"));
    let s = disk.read(&key, &en).expect("en variant");
    assert_eq!(&s.body[..], b"english");
    assert_eq!((s.status, s.lifetime, s.timing.initial_age), (200, 60, 2));
    assert_eq!(s.control.max_age, Some(60));
    assert_eq!(s.headers.len(), 2);
    assert_eq!(&disk.read(&key, &none).expect("no value").body[..], b"none");
    assert!(disk.read(b"http://h/b", &none).is_none());
    // The same variant again replaces its file.
    assert!(disk.write(
        &key,
        &stored("english 2", &[("accept-language", Some("en"))])
    ));
    assert_eq!(disk.len(), 2);
    assert_eq!(files(dir.path()).len(), 2);
    assert_eq!(disk.remove(&key), 2);
    assert!(files(dir.path()).is_empty());
}

#[test]
fn the_least_recently_used_go_over_the_budget() {
    let dir = tempfile::tempdir().expect("tempdir");
    let body = "x".repeat(1000);
    let one = {
        let d = Disk::open(dir.path(), 1 << 20).expect("open");
        d.write(&Bytes::from_static(b"k"), &stored(&body, &[]));
        let n = d.bytes();
        d.remove(b"k");
        n
    };
    let disk = Disk::open(dir.path(), 3 * one).expect("open");
    for k in ["a", "b", "c"] {
        assert!(disk.write(&Bytes::from(k), &stored(&body, &[])));
    }
    assert!(disk.read(b"a", &none).is_some());
    assert!(disk.write(&Bytes::from("d"), &stored(&body, &[])));
    assert!(disk.read(b"b", &none).is_none());
    assert_eq!(disk.len(), 3);
    assert_eq!(files(dir.path()).len(), 3);
    assert_eq!(disk.counts.evicted.load(Ordering::Relaxed), 1);
    // Reopened with less room: the oldest stored go.
    drop(disk);
    let disk = Disk::open(dir.path(), one).expect("open");
    assert_eq!(disk.len(), 1);
    assert_eq!(files(dir.path()).len(), 1);
}

#[test]
fn corrupt_and_partial_files_are_dropped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let body = "y".repeat(5000);
    {
        let disk = Disk::open(dir.path(), 1 << 20).expect("open");
        for k in ["flip", "short", "fine"] {
            assert!(disk.write(&Bytes::from(k), &stored(&body, &[])));
        }
    }
    // A crash's temporary file, a file cut short, a body with a flipped byte.
    fs::write(dir.path().join("tmp.1.1"), b"partial").expect("temp");
    // The names depend on the process's hash keys: the files are found by their heads.
    let mut by_key = HashMap::new();
    for f in files(dir.path()) {
        if let Ok((key, ..)) = read_head(&f) {
            by_key.insert(key, f);
        }
    }
    let short = &by_key[&Bytes::from("short")];
    let data = fs::read(short).expect("read");
    fs::write(short, &data[..data.len() - 10]).expect("cut");
    let flip = &by_key[&Bytes::from("flip")];
    let mut data = fs::read(flip).expect("read");
    let last = data.len() - 1;
    data[last] ^= 1;
    fs::write(flip, &data).expect("flip");
    let disk = Disk::open(dir.path(), 1 << 20).expect("open");
    // The short one is seen at start; the flipped byte only when the body is read.
    assert_eq!(disk.len(), 2);
    assert!(!dir.path().join("tmp.1.1").exists());
    assert!(disk.read(b"flip", &none).is_none());
    assert!(!flip.exists());
    assert!(disk.read(b"fine", &none).is_some());
    assert_eq!(disk.len(), 1);
    assert_eq!(disk.counts.corrupt.load(Ordering::Relaxed), 2);
}

#[test]
fn heads_of_any_bytes_decode_or_fail_without_panicking() {
    let head = Bytes::from(encode_head(b"k", &stored("b", &[("a", Some("v"))])));
    assert!(decode_head(head.clone()).is_some());
    for cut in 0..head.len() {
        assert!(decode_head(head.slice(..cut)).is_none());
    }
    let mut huge = head.to_vec();
    huge[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(decode_head(Bytes::from(huge)).is_none());
}

#[test]
fn trailers_are_kept_on_disk_with_their_response() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = Bytes::from_static(b"http://h/t");
    {
        let disk = Disk::open(dir.path(), 1 << 20).expect("open");
        let mut s = stored("chunked", &[]);
        s.trailers = vec![(Bytes::from_static(b"x-check"), Bytes::from_static(b"abc"))];
        assert!(disk.write(&key, &s));
        // One without trailers beside it: its file ends after its fields, as before.
        assert!(disk.write(
            &Bytes::from_static(b"http://h/plain"),
            &stored("plain", &[])
        ));
    }
    let disk = Disk::open(dir.path(), 1 << 20).expect("reopen");
    let s = disk.read(&key, &none).expect("stored");
    assert_eq!(&s.body[..], b"chunked");
    assert_eq!(
        s.trailers,
        vec![(Bytes::from_static(b"x-check"), Bytes::from_static(b"abc"))]
    );
    let plain = disk
        .read(&Bytes::from_static(b"http://h/plain"), &none)
        .expect("stored");
    assert!(plain.trailers.is_empty());
}
