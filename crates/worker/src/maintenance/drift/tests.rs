use super::*;
use std::time::Duration;
use tidemark_schema::period::Period;

fn policy(on_expiry: ExpiryAction) -> TablePolicy {
    let mut router = RouterConfig::with_prefix("iot");
    router.period = Period::Day;
    router.retention = Duration::from_secs(3 * 86_400);
    TablePolicy::new(
        &router,
        CapacityTiers::default(),
        Billing::Provisioned,
        on_expiry,
    )
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn info(p: &TablePolicy, name: &str, now: DateTime<Utc>, capacity: Capacity) -> TableInfo {
    let period = p.naming.parse(name).unwrap();
    TableInfo {
        name: name.into(),
        period: period.label(),
        state: p.lifecycle.state(&period, now),
        status: "ACTIVE".into(),
        capacity: Some(capacity),
        on_demand_since_ms: None,
        tagged_expired: false,
        warm_write_units: None,
        ceiling: Ceiling::default(),
        table_class: TableClass::Standard,
        class_changed_ms: None,
        scaling: None,
        deletion_protection: false,
        details: Details::default(),
        lift: None,
        backlog: None,
        size_bytes: 0,
        arn: format!("arn:aws:dynamodb:us-east-1:1:table/{name}"),
        start_ms: period.start_ms,
    }
}

/// The actions of a round about `table` only (the round also creates
/// the current and next tables these tests leave out).
fn actions_for(p: &TablePolicy, t: &TableInfo, now: DateTime<Utc>) -> Vec<Action> {
    round_actions(p, std::slice::from_ref(t), now, RoundKind::Rotate)
        .into_iter()
        .filter(|a| a.table() == t.name)
        .collect()
}

/// A table whose TTL, PITR and tags were read, all as wanted.
fn read(p: &TablePolicy, mut t: TableInfo) -> TableInfo {
    t.details = Details {
        ttl: Some(p.ttl_attribute.clone()),
        pitr: Some(false),
        tags: Some(
            [
                (PREFIX_TAG.to_string(), p.naming.prefix.clone()),
                (LAYOUT_TAG.to_string(), p.layout.clone()),
            ]
            .into(),
        ),
        export: None,
    };
    t
}

#[test]
fn ensure_creates_current_and_prebuild_only() {
    let p = policy(ExpiryAction::Delete);
    let now = at("2026-11-22T23:50:00Z");
    let actions = round_actions(&p, &[], now, RoundKind::Ensure);
    let names: Vec<_> = actions.iter().map(Action::table).collect();
    assert_eq!(names, ["iot_2026-11-22", "iot_2026-11-23"]);
    let early = round_actions(&p, &[], at("2026-11-22T12:00:00Z"), RoundKind::Ensure);
    assert_eq!(
        early.len(),
        1,
        "next table is not due before prebuild_ahead"
    );
}

#[test]
fn rotate_resizes_by_state_and_expires() {
    let p = policy(ExpiryAction::Delete);
    let now = at("2026-11-22T01:00:00Z");
    let active = CapacityTiers::default().active.capacity();
    let existing = vec![
        info(&p, "iot_2026-11-18", now, Capacity { read: 1, write: 1 }),
        info(
            &p,
            "iot_2026-11-20",
            now,
            CapacityTiers::default().cold.capacity(),
        ),
        info(&p, "iot_2026-11-21", now, active),
        info(&p, "iot_2026-11-22", now, active),
    ];
    let actions = round_actions(&p, &existing, now, RoundKind::Rotate);
    assert!(actions.contains(&Action::Delete {
        table: "iot_2026-11-18".into()
    }));
    assert!(actions.contains(&Action::Resize {
        table: "iot_2026-11-20".into(),
        state: LifecycleState::Frozen,
        from: CapacityTiers::default().cold.capacity(),
        to: CapacityTiers::default().frozen.capacity(),
    }));
    assert!(actions.contains(&Action::Resize {
        table: "iot_2026-11-21".into(),
        state: LifecycleState::Cold,
        from: active,
        to: CapacityTiers::default().cold.capacity(),
    }));
    assert!(
        !actions.iter().any(|a| a.table() == "iot_2026-11-22"),
        "{actions:?}"
    );
}

#[test]
fn tag_mode_tags_once_and_never_deletes() {
    let p = policy(ExpiryAction::Tag);
    let now = at("2026-11-22T01:00:00Z");
    let mut old = info(&p, "iot_2026-11-10", now, Capacity { read: 1, write: 1 });
    let actions = round_actions(&p, std::slice::from_ref(&old), now, RoundKind::Rotate);
    assert!(actions.contains(&Action::TagExpired {
        table: "iot_2026-11-10".into()
    }));
    old.tagged_expired = true;
    let actions = round_actions(&p, &[old], now, RoundKind::Rotate);
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::Delete { .. } | Action::TagExpired { .. }))
    );
}

#[test]
fn on_demand_never_resizes() {
    let mut p = policy(ExpiryAction::Delete);
    p.billing = Billing::OnDemand {
        warm_write_units: Some(10_000),
    };
    let now = at("2026-11-22T23:50:00Z");
    let mut t = info(&p, "iot_2026-11-21", now, Capacity { read: 5, write: 5 });
    t.capacity = None;
    let actions = round_actions(&p, &[t], now, RoundKind::Rotate);
    assert!(
        actions.iter().all(|a| matches!(a, Action::Create { .. })),
        "{actions:?}"
    );
    let prebuild = actions
        .iter()
        .find(|a| a.table() == "iot_2026-11-23")
        .unwrap();
    assert_eq!(
        prebuild,
        &Action::Create {
            table: "iot_2026-11-23".into(),
            state: LifecycleState::Prebuild,
            capacity: None,
            warm_write_units: Some(10_000),
        }
    );
}

#[test]
fn drift_behind_the_workers_back_is_repaired() {
    let mut p = policy(ExpiryAction::Delete);
    p.ttl_attribute = Some("expires_at".into());
    let now = at("2026-11-22T01:00:00Z");
    let active = CapacityTiers::default().active.capacity();
    let clean = read(&p, info(&p, "iot_2026-11-22", now, active));
    assert_eq!(
        round_actions(&p, std::slice::from_ref(&clean), now, RoundKind::Rotate),
        [],
        "a table in its desired state needs nothing"
    );
    let mut drifted = clean.clone();
    drifted.capacity = Some(Capacity { read: 5, write: 5 });
    drifted.details.ttl = Some(None);
    drifted.details.tags.as_mut().unwrap().remove(LAYOUT_TAG);
    let actions = round_actions(&p, &[drifted], now, RoundKind::Rotate);
    assert_eq!(
        actions,
        [
            Action::Resize {
                table: "iot_2026-11-22".into(),
                state: LifecycleState::Active,
                from: Capacity { read: 5, write: 5 },
                to: active,
            },
            Action::SetTtl {
                table: "iot_2026-11-22".into(),
                from: None,
                to: "expires_at".into(),
            },
            Action::TagLayout {
                table: "iot_2026-11-22".into(),
                arn: clean.arn.clone(),
            },
        ]
    );
}

/// A `<prefix>_<period>` table without this stack's `tidemark:prefix` tag
/// (another application's, or tagged with another prefix) is not ours: no
/// round tags it (adopting it would make it ours to resize and delete),
/// resizes it or deletes it, however expired its name says it is.
#[test]
fn a_table_without_our_prefix_tag_is_left_alone() {
    let p = policy(ExpiryAction::Delete);
    let now = at("2026-11-22T01:00:00Z");
    for tags in [
        vec![],
        vec![(PREFIX_TAG.to_string(), "someone-else".to_string())],
    ] {
        for name in ["iot_2026-11-22", "iot_2026-11-10"] {
            let mut t = read(&p, info(&p, name, now, Capacity { read: 5, write: 5 }));
            t.details.tags = Some(tags.clone().into_iter().collect());
            assert_eq!(actions_for(&p, &t, now), [], "{name} tagged {tags:?}");
        }
    }
    // The same expired table carrying our tag is ours: deleted.
    let expired = info(&p, "iot_2026-11-10", now, Capacity { read: 5, write: 5 });
    assert_eq!(expired.state, LifecycleState::Expired);
    let ours = read(&p, expired);
    assert_eq!(
        actions_for(&p, &ours, now),
        [Action::Delete {
            table: "iot_2026-11-10".into()
        }],
        "an expired table of ours is still deleted"
    );
}

#[test]
fn settings_not_read_this_round_are_left_alone_and_busy_tables_wait() {
    let mut p = policy(ExpiryAction::Delete);
    p.ttl_attribute = Some("expires_at".into());
    p.pitr = true;
    let now = at("2026-11-22T01:00:00Z");
    let unread = info(
        &p,
        "iot_2026-11-22",
        now,
        CapacityTiers::default().active.capacity(),
    );
    assert_eq!(round_actions(&p, &[unread], now, RoundKind::Rotate), []);
    let mut busy = info(&p, "iot_2026-11-22", now, Capacity { read: 5, write: 5 });
    busy.status = "UPDATING".into();
    assert_eq!(round_actions(&p, &[busy], now, RoundKind::Rotate), []);
}

#[test]
fn protection_is_on_while_young_and_lifted_once_cold_then_one_update_per_round() {
    let mut p = policy(ExpiryAction::Delete);
    p.pitr = true;
    p.deletion_protection = true;
    let now = at("2026-11-22T01:00:00Z");
    let tiers = CapacityTiers::default();
    let young = read(&p, info(&p, "iot_2026-11-22", now, tiers.active.capacity()));
    let actions = actions_for(&p, &young, now);
    assert!(actions.contains(&Action::SetPitr {
        table: "iot_2026-11-22".into(),
        enabled: true
    }));
    assert!(actions.contains(&Action::SetDeletionProtection {
        table: "iot_2026-11-22".into(),
        enabled: true
    }));
    let mut cold = read(&p, info(&p, "iot_2026-11-21", now, tiers.active.capacity()));
    cold.deletion_protection = true;
    cold.details.pitr = Some(true);
    let actions = actions_for(&p, &cold, now);
    // The resize to the cold tier goes first; protection comes off next
    // round (DynamoDB takes one UpdateTable at a time).
    assert!(matches!(actions[0], Action::Resize { .. }), "{actions:?}");
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::SetDeletionProtection { .. })),
        "{actions:?}"
    );
    assert!(actions.contains(&Action::SetPitr {
        table: "iot_2026-11-21".into(),
        enabled: false
    }));
    cold.capacity = Some(tiers.cold.capacity());
    let actions = actions_for(&p, &cold, now);
    assert!(actions.contains(&Action::SetDeletionProtection {
        table: "iot_2026-11-21".into(),
        enabled: false
    }));
}

#[test]
fn a_protected_expired_table_is_unprotected_before_its_delete() {
    let mut p = policy(ExpiryAction::Delete);
    p.deletion_protection = true;
    let now = at("2026-11-22T01:00:00Z");
    let mut old = info(&p, "iot_2026-11-10", now, Capacity { read: 1, write: 1 });
    old.deletion_protection = true;
    assert_eq!(
        actions_for(&p, &old, now),
        [Action::SetDeletionProtection {
            table: "iot_2026-11-10".into(),
            enabled: false
        }]
    );
    old.deletion_protection = false;
    assert_eq!(
        actions_for(&p, &old, now),
        [Action::Delete {
            table: "iot_2026-11-10".into()
        }]
    );
}

#[test]
fn export_mode_enables_pitr_exports_waits_and_deletes_only_when_completed() {
    let p = policy(ExpiryAction::Export);
    let now = at("2026-11-22T01:00:00Z");
    let mut old = info(&p, "iot_2026-11-10", now, Capacity { read: 1, write: 1 });
    let name = || "iot_2026-11-10".to_string();
    let plan = |t: &TableInfo| actions_for(&p, t, now);
    assert_eq!(plan(&old), [], "nothing read: nothing done");
    old.details.pitr = Some(false);
    assert_eq!(
        plan(&old),
        [Action::SetPitr {
            table: name(),
            enabled: true
        }]
    );
    old.details.pitr = Some(true);
    let export = Action::Export {
        table: name(),
        arn: old.arn.clone(),
    };
    assert_eq!(plan(&old), std::slice::from_ref(&export));
    old.details.export = Some(ExportState::InProgress);
    assert_eq!(plan(&old), [], "never deleted while the export runs");
    old.details.export = Some(ExportState::Failed("S3 access denied".into()));
    assert_eq!(plan(&old), [export], "a failed export is started again");
    old.details.export = Some(ExportState::Completed);
    assert_eq!(plan(&old), [Action::Delete { table: name() }]);
}

#[test]
fn backfill_tables_are_created_on_demand_and_prebuilt_ones_at_their_tier() {
    let p = policy(ExpiryAction::Delete);
    let now = at("2026-11-22T01:00:00Z").timestamp_millis();
    let week_ago = p.naming.parse("iot_2026-11-20").unwrap();
    let (state, capacity, warm) = p.creation(&week_ago, now);
    assert_eq!(state, LifecycleState::Frozen);
    assert_eq!((capacity, warm), (None, None));
    let current = p.naming.parse("iot_2026-11-22").unwrap();
    assert_eq!(
        p.creation(&current, now).1,
        Some(CapacityTiers::default().active.capacity())
    );
}

#[test]
fn warm_throughput_is_raised_on_a_prebuilt_on_demand_table() {
    let mut p = policy(ExpiryAction::Delete);
    p.billing = Billing::OnDemand {
        warm_write_units: Some(10_000),
    };
    let now = at("2026-11-22T23:50:00Z");
    let mut t = read(
        &p,
        info(&p, "iot_2026-11-23", now, Capacity { read: 1, write: 1 }),
    );
    t.capacity = None;
    t.warm_write_units = Some(4_000);
    assert_eq!(
        round_actions(&p, &[t], now, RoundKind::Rotate)
            .into_iter()
            .filter(|a| a.table() == "iot_2026-11-23")
            .collect::<Vec<_>>(),
        [Action::SetWarmThroughput {
            table: "iot_2026-11-23".into(),
            from: Some(4_000),
            to: 10_000
        }]
    );
}

#[test]
fn a_table_without_a_recorded_layout_gets_the_configs() {
    let p = policy(ExpiryAction::Delete);
    let now = at("2026-11-22T01:00:00Z");
    let mut t = read(
        &p,
        info(
            &p,
            "iot_2026-11-22",
            now,
            CapacityTiers::default().active.capacity(),
        ),
    );
    t.details.tags.as_mut().unwrap().remove(LAYOUT_TAG);
    assert_eq!(
        actions_for(&p, &t, now),
        [Action::TagLayout {
            table: "iot_2026-11-22".into(),
            arn: t.arn.clone()
        }]
    );
}

/// An expired table is deleted (or exported) only once the expiry guard has
/// passed: writes accepted until the guard before expiry have landed.
#[test]
fn an_expired_table_is_left_alone_until_the_guard_has_passed() {
    let frozen = Capacity { read: 1, write: 1 };
    for action in [ExpiryAction::Delete, ExpiryAction::Export] {
        let p = policy(action);
        // iot_2026-11-18 expires at 2026-11-22T00:00Z (3 days after its end).
        let early = at("2026-11-22T00:05:00Z");
        let t = read(&p, info(&p, "iot_2026-11-18", early, frozen));
        let mut t2 = t.clone();
        t2.details.pitr = Some(true);
        assert_eq!(t.state, LifecycleState::Expired);
        assert_eq!(actions_for(&p, &t, early), vec![], "{action:?}");
        assert_eq!(actions_for(&p, &t2, early), vec![], "{action:?}");
        let past = at("2026-11-22T00:10:00Z");
        assert!(!actions_for(&p, &t2, past).is_empty(), "{action:?}");
    }
}

/// A late backlog on a frozen table: lifted to what the backlog needs
/// (written within a minute, within the budget), the lift renewed while the
/// backlog lasts and never reverted by reconcile, then ended (back to the
/// tier) once no backlog was seen for the hold time.
#[test]
fn a_late_backlog_lifts_its_table_until_it_is_gone() {
    let p = policy(ExpiryAction::Delete);
    let now = at("2026-11-22T01:00:00Z");
    let now_ms = now.timestamp_millis();
    let frozen = CapacityTiers::default().frozen.capacity();
    let mut t = read(&p, info(&p, "iot_2026-11-20", now, frozen));
    assert_eq!(t.state, LifecycleState::Frozen);
    assert_eq!(actions_for(&p, &t, now), [], "no backlog: the tier");
    t.backlog = Some(Backlog {
        items: 2_000,
        wcu: 6_000,
    });
    let lifted = Capacity {
        read: frozen.read,
        write: 100,
    };
    let lift = Lift {
        write: 100,
        on_demand: false,
        on_demand_refused_ms: None,
        reason: super::super::lift::LATE_BACKLOG.into(),
        since_ms: now_ms,
        renewed_ms: now_ms,
        backlog_items: 2_000,
    };
    assert_eq!(
        actions_for(&p, &t, now),
        [Action::Lift {
            table: t.name.clone(),
            state: LifecycleState::Frozen,
            from: frozen,
            to: lifted,
            backlog: t.backlog.unwrap(),
            record: lift.clone(),
        }]
    );
    // Applied: the table at 100 WCU, the lift recorded.
    t.capacity = Some(lifted);
    t.lift = Some(lift.clone());
    // Still a backlog (smaller): renewed, never lowered meanwhile.
    let later = now + chrono::Duration::seconds(60);
    t.backlog = Some(Backlog {
        items: 500,
        wcu: 500,
    });
    let a = actions_for(&p, &t, later);
    assert!(
        matches!(&a[..], [Action::RenewLift { lift: l, .. }] if l.renewed_ms == later.timestamp_millis() && l.write == 100),
        "{a:?}"
    );
    // The backlog is gone: the lift holds for its hold time, then ends.
    t.backlog = None;
    assert_eq!(actions_for(&p, &t, now + chrono::Duration::seconds(90)), []);
    // Lowered by hand meanwhile: the lift is restored.
    let mut lowered = t.clone();
    lowered.capacity = Some(frozen);
    assert!(matches!(
        &actions_for(&p, &lowered, now + chrono::Duration::seconds(90))[..],
        [Action::Lift { to, .. }] if *to == lifted
    ));
    let end = actions_for(&p, &t, now + chrono::Duration::seconds(121));
    assert_eq!(
        end,
        [Action::EndLift {
            table: t.name.clone(),
            state: LifecycleState::Frozen,
            from: lifted,
            to: frozen,
        }]
    );
    assert!(end[0].trusts_the_clock(), "lowering capacity is checked");
    assert!(
        !Action::Lift {
            table: t.name.clone(),
            state: LifecycleState::Frozen,
            from: frozen,
            to: lifted,
            backlog: Backlog::default(),
            record: lift,
        }
        .trusts_the_clock()
    );
}

/// No lift for the current table (its backlog is no late data), nor with
/// lifts switched off, nor beyond the budget.
#[test]
fn lifts_are_for_late_tables_within_the_budget() {
    let mut p = policy(ExpiryAction::Delete);
    let now = at("2026-11-22T01:00:00Z");
    let tiers = CapacityTiers::default();
    let mut current = read(&p, info(&p, "iot_2026-11-22", now, tiers.active.capacity()));
    current.backlog = Some(Backlog {
        items: 1_000_000,
        wcu: 1_000_000,
    });
    assert_eq!(actions_for(&p, &current, now), []);
    let mut cold = read(&p, info(&p, "iot_2026-11-21", now, tiers.cold.capacity()));
    assert_eq!(cold.state, LifecycleState::Cold);
    cold.backlog = Some(Backlog {
        items: 10_000_000,
        wcu: 10_000_000,
    });
    assert!(matches!(
        &actions_for(&p, &cold, now)[..],
        [Action::Lift { to, .. }] if to.write == 1000
    ));
    p.late_lift.max_wcu = 0;
    assert_eq!(actions_for(&p, &cold, now), [], "lifts off");
}

/// With `late_lift = "on_demand"`: a late backlog switches its frozen table
/// to on-demand (write throughput capped at the lift budget, a provisioned
/// lift as the fallback should DynamoDB refuse), the lift is renewed while
/// the backlog lasts, never touched by reconcile, and the table goes back
/// to provisioned at its tier once the backlog is gone for the hold time.
#[test]
fn an_on_demand_lift_switches_the_table_and_back_once_the_backlog_is_gone() {
    let mut p = policy(ExpiryAction::Delete);
    p.late_lift.on_demand = true;
    let now = at("2026-11-22T01:00:00Z");
    let now_ms = now.timestamp_millis();
    let frozen = CapacityTiers::default().frozen.capacity();
    let mut t = read(&p, info(&p, "iot_2026-11-20", now, frozen));
    t.backlog = Some(Backlog {
        items: 2_000,
        wcu: 6_000,
    });
    let record = Lift {
        write: 0,
        on_demand: true,
        on_demand_refused_ms: None,
        reason: super::super::lift::LATE_BACKLOG.into(),
        since_ms: now_ms,
        renewed_ms: now_ms,
        backlog_items: 2_000,
    };
    assert_eq!(
        actions_for(&p, &t, now),
        [Action::LiftOnDemand {
            table: t.name.clone(),
            state: LifecycleState::Frozen,
            from: frozen,
            max_write: 1000,
            fallback: Capacity {
                read: frozen.read,
                write: 100,
            },
            backlog: t.backlog.unwrap(),
            record: record.clone(),
        }]
    );
    // Applied: on demand (DynamoDB records the switch), the lift recorded.
    t.capacity = None;
    t.on_demand_since_ms = Some(now_ms);
    t.lift = Some(record);
    let later = now + chrono::Duration::seconds(60);
    t.backlog = Some(Backlog {
        items: 500,
        wcu: 500,
    });
    let a = actions_for(&p, &t, later);
    assert!(
        matches!(&a[..], [Action::RenewLift { lift: l, .. }] if l.on_demand && l.renewed_ms == later.timestamp_millis()),
        "{a:?}"
    );
    t.lift.as_mut().unwrap().renewed_ms = later.timestamp_millis();
    t.backlog = None;
    assert_eq!(
        actions_for(&p, &t, later + chrono::Duration::seconds(60)),
        [],
        "held: neither ended nor touched by reconcile"
    );
    let end = actions_for(&p, &t, later + chrono::Duration::seconds(121));
    assert_eq!(
        end,
        [Action::EndOnDemandLift {
            table: t.name.clone(),
            state: LifecycleState::Frozen,
            to: frozen,
        }]
    );
    assert!(end[0].trusts_the_clock(), "lowering is checked");
}

/// DynamoDB allows four switches to on-demand per table in 24 hours: a
/// table switched within 6 hours, or whose switch was refused within 6
/// hours, is lifted provisioned (the refusal carried on), never switched
/// again in a loop; after 6 hours it may be switched again.
#[test]
fn a_table_switched_or_refused_lately_is_lifted_provisioned() {
    let mut p = policy(ExpiryAction::Delete);
    p.late_lift.on_demand = true;
    let now = at("2026-11-22T01:00:00Z");
    let hours_ago = |h: i64| Some(now.timestamp_millis() - h * 3_600_000);
    let frozen = CapacityTiers::default().frozen.capacity();
    let mut t = read(&p, info(&p, "iot_2026-11-20", now, frozen));
    t.backlog = Some(Backlog {
        items: 2_000,
        wcu: 6_000,
    });
    t.on_demand_since_ms = hours_ago(1);
    let a = actions_for(&p, &t, now);
    assert!(
        matches!(&a[..], [Action::Lift { to, record, .. }] if to.write == 100 && !record.on_demand),
        "switched an hour ago: {a:?}"
    );
    t.on_demand_since_ms = hours_ago(7);
    assert!(matches!(
        &actions_for(&p, &t, now)[..],
        [Action::LiftOnDemand { .. }]
    ));
    // A refused switch (recorded with the provisioned fallback it got).
    t.capacity = Some(Capacity {
        read: frozen.read,
        write: 50,
    });
    t.lift = Some(Lift {
        write: 50,
        on_demand: false,
        on_demand_refused_ms: hours_ago(1),
        reason: super::super::lift::LATE_BACKLOG.into(),
        since_ms: hours_ago(1).unwrap(),
        renewed_ms: hours_ago(1).unwrap(),
        backlog_items: 2_000,
    });
    let a = actions_for(&p, &t, now);
    assert!(
        matches!(&a[..], [Action::Lift { to, record, .. }]
            if to.write == 100 && !record.on_demand && record.on_demand_refused_ms == hours_ago(1)),
        "refused an hour ago: provisioned, the refusal kept: {a:?}"
    );
    t.lift.as_mut().unwrap().on_demand_refused_ms = hours_ago(7);
    assert!(matches!(
        &actions_for(&p, &t, now)[..],
        [Action::LiftOnDemand { .. }]
    ));
    // Without the setting, never on demand.
    p.late_lift.on_demand = false;
    t.lift = None;
    t.on_demand_since_ms = None;
    assert!(matches!(
        &actions_for(&p, &t, now)[..],
        [Action::Lift { .. }]
    ));
}

/// A class change waits for the table's tags (where a refusal is
/// recorded), for a day after a refusal, and for 15 days after the last
/// change (DynamoDB allows two in 30 days).
#[test]
fn class_changes_are_spaced_and_a_refusal_waits_a_day() {
    let mut p = policy(ExpiryAction::Delete);
    p.tiers.frozen.table_class = Some(TableClass::StandardInfrequentAccess);
    let now = at("2026-11-22T10:00:00Z");
    let now_ms = now.timestamp_millis();
    let frozen = CapacityTiers::default().frozen.capacity();
    let unread = info(&p, "iot_2026-11-20", now, frozen);
    assert_eq!(unread.state, LifecycleState::Frozen);
    assert!(actions_for(&p, &unread, now).is_empty(), "tags unread");
    let t = read(&p, unread);
    assert_eq!(
        actions_for(&p, &t, now),
        [Action::SetTableClass {
            table: t.name.clone(),
            arn: t.arn.clone(),
            from: TableClass::Standard,
            to: TableClass::StandardInfrequentAccess,
        }]
    );
    let mut refused = t.clone();
    let hour_ago = now_ms - 3_600_000;
    refused
        .details
        .tags
        .as_mut()
        .unwrap()
        .insert(CLASS_REFUSED_TAG.into(), hour_ago.to_string());
    assert!(
        actions_for(&p, &refused, now).is_empty(),
        "refused an hour ago"
    );
    let later = now + chrono::Duration::hours(24);
    assert_eq!(
        actions_for(&p, &refused, later).len(),
        1,
        "asked again a day on"
    );
    let mut recent = t.clone();
    recent.class_changed_ms = Some(now_ms - 14 * 86_400_000);
    assert!(
        actions_for(&p, &recent, now).is_empty(),
        "changed 14 days ago"
    );
    recent.class_changed_ms = Some(now_ms - 15 * 86_400_000);
    assert_eq!(
        actions_for(&p, &recent, now).len(),
        1,
        "changed 15 days ago"
    );
    // Already in its class: nothing; a tier without a class: left alone.
    let mut there = t.clone();
    there.table_class = TableClass::StandardInfrequentAccess;
    assert!(actions_for(&p, &there, now).is_empty());
    p.tiers.frozen.table_class = None;
    assert!(actions_for(&p, &t, now).is_empty());
}

/// An on-demand tier that sets only a write ceiling restores it and keeps
/// the read ceiling the table has; a provisioned table is never given one.
#[test]
fn an_on_demand_ceiling_is_restored_side_by_side() {
    let mut p = policy(ExpiryAction::Delete);
    p.billing = Billing::OnDemand {
        warm_write_units: None,
    };
    p.tiers.active.max_write_units = Some(4000);
    let now = at("2026-11-22T10:00:00Z");
    let mut t = read(
        &p,
        info(&p, "iot_2026-11-22", now, Capacity { read: 1, write: 1 }),
    );
    t.capacity = None;
    t.ceiling = Ceiling {
        read: Some(700),
        write: None,
    };
    assert_eq!(
        actions_for(&p, &t, now),
        [Action::SetCeiling {
            table: t.name.clone(),
            from: t.ceiling,
            to: Ceiling {
                read: Some(700),
                write: Some(4000)
            },
        }]
    );
    t.ceiling.write = Some(4000);
    assert!(actions_for(&p, &t, now).is_empty());
    p.billing = Billing::Provisioned;
    t.ceiling.write = Some(9000);
    assert!(
        !actions_for(&p, &t, now)
            .iter()
            .any(|a| matches!(a, Action::SetCeiling { .. }))
    );
}

/// An auto-scaled side keeps what the policy gave it within the tier's
/// range (not resized to the fixed tier), a side leaving auto scaling is
/// deregistered before its resize, a late backlog on an auto-scaled table
/// is the policy's (no lift), and someone else's target is never removed.
#[test]
fn auto_scaled_sides_are_clamped_not_resized_and_not_lifted() {
    use tidemark_schema::period::{Autoscale, ScaleRange};
    let range = ScaleRange {
        min: 500,
        max: 4000,
        target_utilization: 70,
    };
    let mut p = policy(ExpiryAction::Delete);
    p.tiers.active.autoscale = Some(Autoscale {
        read: None,
        write: Some(range),
    });
    p.tiers.cold.autoscale = p.tiers.active.autoscale;
    let now = at("2026-11-22T10:00:00Z");
    let registered = Scaling {
        read: None,
        write: Some(Registered { range, ours: true }),
    };
    // Scaled up to 2,500 by the policy: left there.
    let mut t = read(
        &p,
        info(
            &p,
            "iot_2026-11-22",
            now,
            Capacity {
                read: 300,
                write: 2500,
            },
        ),
    );
    t.scaling = Some(registered);
    assert!(
        actions_for(&p, &t, now).is_empty(),
        "{:?}",
        actions_for(&p, &t, now)
    );
    // Not registered yet, and below its min: registered, and raised to min.
    t.scaling = Some(Scaling::default());
    t.capacity = Some(Capacity {
        read: 300,
        write: 100,
    });
    assert_eq!(
        actions_for(&p, &t, now),
        [
            Action::SetScaling {
                table: t.name.clone(),
                side: Side::Write,
                from: None,
                to: range
            },
            Action::Resize {
                table: t.name.clone(),
                state: LifecycleState::Active,
                from: Capacity {
                    read: 300,
                    write: 100
                },
                to: Capacity {
                    read: 300,
                    write: 500
                },
            }
        ]
    );
    // Scaling unknown this round: no scaling action, still clamped.
    t.scaling = None;
    t.capacity = Some(Capacity {
        read: 300,
        write: 2500,
    });
    assert!(actions_for(&p, &t, now).is_empty());
    // Frozen has no auto scaling: ours deregistered, then the resize.
    let mut f = read(
        &p,
        info(
            &p,
            "iot_2026-11-19",
            now,
            Capacity {
                read: 1,
                write: 900,
            },
        ),
    );
    f.scaling = Some(registered);
    let kinds: Vec<&str> = actions_for(&p, &f, now).iter().map(Action::kind).collect();
    assert_eq!(kinds, ["remove_scaling", "resize"]);
    // Someone else's target: left alone (the resize still happens).
    f.scaling = Some(Scaling {
        read: None,
        write: Some(Registered { range, ours: false }),
    });
    let kinds: Vec<&str> = actions_for(&p, &f, now).iter().map(Action::kind).collect();
    assert_eq!(kinds, ["resize"]);
    // A cold table with a late backlog whose tier auto-scales writes: no
    // lift, the policy scales it.
    let mut c = read(
        &p,
        info(
            &p,
            "iot_2026-11-21",
            now,
            Capacity {
                read: 100,
                write: 500,
            },
        ),
    );
    c.scaling = Some(registered);
    c.backlog = Some(Backlog {
        items: 50_000,
        wcu: 50_000,
    });
    assert!(
        !actions_for(&p, &c, now)
            .iter()
            .any(|a| matches!(a, Action::Lift { .. } | Action::LiftOnDemand { .. })),
        "{:?}",
        actions_for(&p, &c, now)
    );
    // Expiry: ours deregistered first, the delete the round after.
    let mut e = read(
        &p,
        info(&p, "iot_2026-11-10", now, Capacity { read: 1, write: 1 }),
    );
    e.scaling = Some(registered);
    let kinds: Vec<&str> = actions_for(&p, &e, now).iter().map(Action::kind).collect();
    assert_eq!(kinds, ["remove_scaling"]);
    e.scaling = Some(Scaling::default());
    let kinds: Vec<&str> = actions_for(&p, &e, now).iter().map(Action::kind).collect();
    assert_eq!(kinds, ["delete"]);
}

/// Scaling changes that can lower a table's capacity run only while this
/// host's clock agrees with DynamoDB's, as resizes down do.
#[test]
fn scaling_that_can_lower_capacity_trusts_the_clock() {
    use tidemark_schema::period::ScaleRange;
    let r = |min, max| ScaleRange {
        min,
        max,
        target_utilization: 70,
    };
    let set = |from, to| Action::SetScaling {
        table: "t".into(),
        side: Side::Write,
        from,
        to,
    };
    assert!(!set(None, r(5, 50)).trusts_the_clock());
    assert!(!set(Some(r(5, 50)), r(10, 100)).trusts_the_clock());
    assert!(set(Some(r(5, 50)), r(2, 20)).trusts_the_clock());
    let remove = Action::RemoveScaling {
        table: "t".into(),
        side: Side::Write,
    };
    assert!(remove.trusts_the_clock());
}
