//! Restore notices through the real binary: a kernel started over the
//! snapshot offers its restore to every worker, so a worker that dies
//! before storing the notice loses nothing, and the next never doubles it.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::support::wire::frame;
use crate::support::{alive, kill9, wait_until, Env};

/// Greet the kernel of `id` as a worker would and read its hello; then
/// hang up, as a worker killed before it stored anything.
fn greet_and_vanish(env: &Env, id: &str, protocol: u64) -> serde_json::Value {
    let socket = env.dir.join("run/kernels").join(format!("{id}.sock"));
    let mut stream = UnixStream::connect(&socket).expect("the kernel listens");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let hello = serde_json::json!({"type": "hello", "protocol": protocol, "build_id": "a test"});
    stream
        .write_all(&frame(hello.to_string().as_bytes()))
        .unwrap();
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).unwrap();
    let mut payload = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut payload).unwrap();
    serde_json::from_slice(&payload).unwrap()
}

fn notices(env: &Env, id: &str) -> usize {
    env.log(id)
        .matches("kernel restored from its snapshot")
        .count()
}

#[test]
fn a_restore_whose_first_worker_died_unstored_is_noticed_once() {
    let env = Env::new("restore-offered");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["bash", &id, "--", "cd /tmp"]);
    let kernel = env.kernel_pid(&id).expect("its kernel lives");
    env.ok(&["shutdown", "--force"]);
    wait_until(Duration::from_secs(15), "the kernel is gone", || {
        !alive(kernel)
    });

    // A kernel started over the snapshot with no worker yet, as a worker
    // starts one; its first worker takes the hello and dies.
    let started = env.run(&["kernel", &id, "--detach"]);
    assert!(started.status.success(), "{started:?}");
    let record = env.kernel_record(&id).expect("the kernel recorded itself");
    let hello = greet_and_vanish(&env, &id, record["protocol"].as_u64().unwrap());
    assert!(
        hello["restored"]
            .as_str()
            .is_some_and(|t| t.contains("/tmp")),
        "{hello}"
    );

    // The next worker stores the notice; the one after it does not again.
    assert_eq!(env.ok(&["bash", &id, "--", "pwd"]), "/tmp\n");
    assert_eq!(notices(&env, &id), 1, "{}", env.log(&id));
    let worker = env.worker_pid(&id).unwrap();
    kill9(worker);
    wait_until(Duration::from_secs(15), "another worker serves", || {
        env.worker_pid(&id).is_some_and(|pid| pid != worker)
    });
    assert_eq!(env.ok(&["bash", &id, "--", "pwd"]), "/tmp\n");
    assert_eq!(notices(&env, &id), 1, "{}", env.log(&id));
    assert_eq!(
        env.kernel_record(&id).unwrap()["identity"],
        record["identity"],
        "one kernel all along"
    );
}
