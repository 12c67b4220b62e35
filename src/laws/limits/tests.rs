use super::*;

#[test]
fn sizes_read_as_systemd_reads_them() {
    assert_eq!(parse_memory_max("1024"), Ok(Max::Value(1024)));
    assert_eq!(parse_memory_max("64M"), Ok(Max::Value(64 << 20)));
    assert_eq!(parse_memory_max("2G"), Ok(Max::Value(2 << 30)));
    assert_eq!(parse_memory_max("3K"), Ok(Max::Value(3 << 10)));
    assert_eq!(parse_memory_max("1T"), Ok(Max::Value(1 << 40)));
    assert_eq!(parse_memory_max("infinity"), Ok(Max::Infinity));
}

#[test]
fn a_refused_size_names_the_value_and_what_is_accepted() {
    for bad in [
        "",
        "0",
        "64m",
        "1.5G",
        "-1",
        "64 M",
        "50%",
        "M",
        "99999999999999999999",
    ] {
        let err = parse_memory_max(bad).unwrap_err().to_string();
        assert_eq!(
            err,
            format!("--memory-max {bad:?}: expected {MEMORY_MAX_ACCEPTED}"),
            "{bad}"
        );
    }
    assert!(parse_memory_max("17179869184T").is_err(), "overflow");
}

#[test]
fn cpu_quota_is_a_whole_percentage_and_may_pass_one_cpu() {
    assert_eq!(parse_cpu_quota("50%"), Ok(50));
    assert_eq!(parse_cpu_quota("250%"), Ok(250));
    for bad in ["50", "0%", "%", "1.5%", "-5%", "infinity"] {
        let err = parse_cpu_quota(bad).unwrap_err().to_string();
        assert_eq!(
            err,
            format!("--cpu-quota {bad:?}: expected {CPU_QUOTA_ACCEPTED}")
        );
    }
    assert_eq!(ResourceLimits::cpu_quota_usec(50), 500_000);
    assert_eq!(ResourceLimits::cpu_quota_usec(250), 2_500_000);
    assert_eq!(ResourceLimits::cpu_max_text(50), "50000 100000");
    assert_eq!(ResourceLimits::cpu_max_text(200), "200000 100000");
}

#[test]
fn tasks_max_is_a_count_or_infinity() {
    assert_eq!(parse_tasks_max("50"), Ok(Max::Value(50)));
    assert_eq!(parse_tasks_max("infinity"), Ok(Max::Infinity));
    for bad in ["0", "5k", "", "many"] {
        let err = parse_tasks_max(bad).unwrap_err().to_string();
        assert_eq!(
            err,
            format!("--tasks-max {bad:?}: expected {TASKS_MAX_ACCEPTED}")
        );
    }
}

#[test]
fn limits_round_trip_through_json_and_absent_ones_are_left_out() {
    let limits = ResourceLimits {
        memory_max: Some(Max::Value(64 << 20)),
        cpu_quota_percent: None,
        tasks_max: Some(Max::Infinity),
    };
    let json = serde_json::to_string(&limits).unwrap();
    assert_eq!(json, r#"{"memory_max":67108864,"tasks_max":"infinity"}"#);
    assert_eq!(
        serde_json::from_str::<ResourceLimits>(&json).unwrap(),
        limits
    );
    assert_eq!(
        serde_json::to_string(&ResourceLimits::default()).unwrap(),
        "{}"
    );
    assert!(serde_json::from_str::<ResourceLimits>(r#"{"memory_max":"lots"}"#).is_err());
    assert!(serde_json::from_str::<ResourceLimits>(r#"{"swap_max":1}"#).is_err());
}

#[test]
fn given_limits_win_over_the_defaults_one_by_one() {
    let given = ResourceLimits {
        memory_max: Some(Max::Value(1 << 20)),
        ..ResourceLimits::default()
    };
    let defaults = ResourceLimits {
        memory_max: Some(Max::Value(1 << 30)),
        cpu_quota_percent: Some(50),
        tasks_max: None,
    };
    let merged = given.or(defaults);
    assert_eq!(merged.memory_max, Some(Max::Value(1 << 20)));
    assert_eq!(merged.cpu_quota_percent, Some(50));
    assert_eq!(merged.tasks_max, None);
    assert_eq!(merged.to_string(), "memory-max 1M, cpu-quota 50%");
}

#[test]
fn sizes_are_told_in_the_shortest_exact_unit() {
    assert_eq!(size_text(Max::Value(512 << 20)), "512M");
    assert_eq!(size_text(Max::Value(1536 << 20)), "1536M");
    assert_eq!(size_text(Max::Value(1000)), "1000");
    assert_eq!(size_text(Max::Infinity), "infinity");
}

fn memory(bytes: u64) -> ResourceLimits {
    ResourceLimits {
        memory_max: Some(Max::Value(bytes)),
        ..ResourceLimits::default()
    }
}

#[test]
fn the_process_backend_refuses_limits_without_delegated_controllers() {
    let unified = CgroupPlace::Found {
        dir: "/sys/fs/cgroup/unified".into(),
        controllers: vec![],
        writable: true,
    };
    assert_eq!(
        process_backend_refusal(&memory(512 << 20), &unified).as_deref(),
        Some(
            "resource limits need cgroup v2 with the memory controller delegated; \
             /sys/fs/cgroup/unified has none (use the systemd backend, or drop --memory-max)"
        )
    );
    let no_pids = CgroupPlace::Found {
        dir: "/sys/fs/cgroup/user.slice".into(),
        controllers: vec!["memory".into(), "cpu".into()],
        writable: true,
    };
    let tasks = ResourceLimits {
        tasks_max: Some(Max::Value(9)),
        ..memory(1 << 20)
    };
    let why = process_backend_refusal(&tasks, &no_pids).unwrap();
    assert!(
        why.contains("the pids controller") && why.ends_with("drop --tasks-max)"),
        "{why}"
    );
    let none = CgroupPlace::NoCgroup2 {
        why: "this process is in no cgroup v2 hierarchy".into(),
    };
    assert!(process_backend_refusal(&memory(1), &none).is_some());
    let read_only = CgroupPlace::Found {
        dir: "/sys/fs/cgroup".into(),
        controllers: vec!["memory".into()],
        writable: false,
    };
    assert!(process_backend_refusal(&memory(1), &read_only)
        .unwrap()
        .contains("not writable"));
}

#[test]
fn a_delegated_cgroup_or_no_limits_is_never_refused() {
    let delegated = CgroupPlace::Found {
        dir: "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service".into(),
        controllers: vec!["cpu".into(), "memory".into(), "pids".into()],
        writable: true,
    };
    let all = ResourceLimits {
        memory_max: Some(Max::Value(1)),
        cpu_quota_percent: Some(10),
        tasks_max: Some(Max::Value(10)),
    };
    assert_eq!(process_backend_refusal(&all, &delegated), None);
    let none = CgroupPlace::NoCgroup2 { why: "x".into() };
    assert_eq!(
        process_backend_refusal(&ResourceLimits::default(), &none),
        None
    );
}

#[test]
fn an_oom_kill_during_the_run_is_told_with_the_limit() {
    let limit = Some(Max::Value(512 << 20));
    assert_eq!(
        oom_notice("r7", true, 2, 3, limit).as_deref(),
        Some("run 7 was killed: the session's memory limit (512M) was reached")
    );
    assert_eq!(
        oom_notice("b4-9-1", true, 0, 1, limit).as_deref(),
        Some("bash 4 was killed: the session's memory limit (512M) was reached")
    );
    assert_eq!(oom_notice("r7", true, 3, 3, limit), None, "no new OOM kill");
    assert_eq!(
        oom_notice("r7", false, 2, 3, limit),
        None,
        "ended otherwise"
    );
    assert_eq!(oom_notice("r7", true, 2, 3, None), None, "no memory limit");
    assert_eq!(oom_notice("t1", true, 2, 3, limit), None, "no run");
}

#[test]
fn jobs_are_named_as_the_user_knows_them() {
    assert_eq!(job_label("r12").as_deref(), Some("run 12"));
    assert_eq!(job_label("b3-ab-2").as_deref(), Some("bash 3"));
    assert_eq!(job_label("r"), None);
    assert_eq!(job_label("rx"), None);
    assert_eq!(job_label(""), None);
    assert_eq!(job_label("template"), None);
}

#[test]
fn systemd_warns_of_each_limit_its_user_manager_cannot_enforce() {
    let all = ResourceLimits {
        memory_max: Some(Max::Value(64 << 20)),
        cpu_quota_percent: Some(150),
        tasks_max: Some(Max::Value(50)),
    };
    assert_eq!(
        systemd_unenforced(&all, &[]).as_deref(),
        Some(
            "the user manager's cgroup has no memory, cpu, pids controllers (it has none): \
             MemoryMax, CPUQuota, TasksMax are set on the session's kernel unit but not enforced; \
             delegate the controllers to the user manager (Delegate= of user@.service) or drop --memory-max, --cpu-quota, --tasks-max"
        )
    );
    let memory_and_pids = ["memory".to_string(), "pids".to_string()];
    let why = systemd_unenforced(&all, &memory_and_pids).unwrap();
    assert!(
        why.contains("no cpu controller (it has memory pids): CPUQuota is set")
            && why.ends_with("drop --cpu-quota"),
        "{why}"
    );
    assert_eq!(systemd_unenforced(&memory(1), &memory_and_pids), None);
    assert_eq!(systemd_unenforced(&ResourceLimits::default(), &[]), None);
}
