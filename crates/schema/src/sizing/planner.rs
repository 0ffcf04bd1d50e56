//! The planner's steps: the layout (strategy, shards, partitions), the
//! period, the evaluation, Kinesis, cost, the decisions with their reasons
//! and trade-offs, and the review of a config's layout. Each step writes
//! its arithmetic lines and warnings as it goes.

use super::spread::{self, Spread, Traffic, round3};
use super::*;

/// The planner's working state: the input, the rates, and the lines and
/// warnings written so far.
pub(super) struct Planner<'a> {
    pub(super) input: &'a SizingInput,
    pub(super) load: Load,
    traffic: Traffic,
    /// Partitions before any were added for the layout.
    p0: u32,
    pub(super) lines: Vec<String>,
    pub(super) warnings: Vec<String>,
}

impl<'a> Planner<'a> {
    pub(super) fn new(input: &'a SizingInput) -> Self {
        let mut lines = Vec::new();
        let wcu_per_item =
            size::wcu_for_size(usize::try_from(input.avg_item_bytes).unwrap_or(usize::MAX));
        lines.push(format!(
            "WCU per item = ceil({} B / {WCU_BYTES} B) = {wcu_per_item}",
            thousands(input.avg_item_bytes)
        ));
        let w = wcu_per_item as f64;
        let peak_wcu = ceil_u64(input.peak_events_per_sec * w);
        lines.push(format!(
            "peak WCU = {} events/s x {wcu_per_item} = {}",
            rate(input.peak_events_per_sec),
            thousands(peak_wcu)
        ));
        let hot_eps = input
            .peak_key_events_per_sec
            .unwrap_or(input.peak_events_per_sec);
        let hot_key_wcu = ceil_u64(hot_eps * w).min(peak_wcu);
        lines.push(match input.peak_key_events_per_sec {
            Some(_) => format!(
                "busiest entity's WCU = {} events/s x {wcu_per_item} = {}",
                rate(hot_eps),
                thousands(hot_key_wcu)
            ),
            None => format!(
                "busiest entity's WCU = the whole peak, {} (no --peak-key-events-per-sec: the stream taken as one key)",
                thousands(hot_key_wcu)
            ),
        });
        let min_write_shards = ceil_u32(hot_key_wcu as f64 / PARTITION_WCU).max(1);
        let head_room_shards =
            ceil_u32(hot_key_wcu as f64 * input.safety_factor / PARTITION_WCU).max(1);
        lines.push(format!(
            "keys one entity needs = ceil({} WCU / 1,000 WCU per key) = {min_write_shards}; with head-room x{} = ceil({} / 1,000) = {head_room_shards}",
            thousands(hot_key_wcu),
            input.safety_factor,
            wcu(hot_key_wcu as f64 * input.safety_factor),
        ));
        let rest = (peak_wcu - hot_key_wcu) as f64;
        let others = input.entities.map(|e| e.saturating_sub(1));
        let mut warnings = Vec::new();
        if input.peak_key_events_per_sec.is_none() {
            warnings.push(
                "the busiest entity's rate is not given: the whole stream is taken as one key (give --peak-key-events-per-sec)".into(),
            );
        } else if input.entities.is_none() && rest > 0.0 {
            warnings.push(
                "the number of entities is not given: the rest of the stream is taken as many small entities (give --entities if there are few)".into(),
            );
        }
        Planner {
            input,
            load: Load {
                wcu_per_item,
                avg_wcu: input.avg_events_per_sec * w,
                peak_wcu,
                hot_key_wcu,
                hot_key_assumed: input.peak_key_events_per_sec.is_none(),
                entities: input.entities,
                min_write_shards,
                head_room_shards,
            },
            traffic: Traffic {
                hot: hot_key_wcu as f64,
                rest,
                others,
            },
            p0: 1,
            lines,
            warnings,
        }
    }

    /// The most WCU a key may take at the peak: 1,000 over the head-room.
    fn key_limit(&self) -> f64 {
        PARTITION_WCU / self.input.safety_factor
    }

    fn spread(&self, key: &KeyStrategy, partitions: u32) -> Spread {
        spread::spread(key, &self.traffic, partitions)
    }

    /// A layout takes the peak: every key within its head-room, the
    /// hottest partition within 1,000 WCU.
    fn holds(&self, key: &KeyStrategy, partitions: u32) -> Option<Spread> {
        let s = self.spread(key, partitions);
        (s.hottest_key <= self.key_limit() + 1e-9 && s.hottest_partition <= PARTITION_WCU + 1e-9)
            .then_some(s)
    }

    /// The capacity to provision: the peak with the partition head-room,
    /// or all of `partitions` when the layout needed more than that makes.
    pub(super) fn capacity(&self, partitions: u32) -> u64 {
        let head_room = ceil_u64(self.load.peak_wcu as f64 * self.input.max_partition_skew);
        if partitions > self.p0 {
            head_room.max(u64::from(partitions) * 1000)
        } else {
            head_room
        }
    }

    /// The strategy and shards, and the partitions they need.
    pub(super) fn layout(&mut self) -> (KeyStrategy, u32) {
        let skew = self.input.max_partition_skew;
        let p0 = match self.input.table_partitions {
            Some(n) => {
                self.lines.push(format!("table partitions = {n} (given)"));
                n
            }
            None => {
                let w = ceil_u64(self.load.peak_wcu as f64 * skew);
                let n = ceil_u32(w as f64 / PARTITION_WCU).max(1);
                self.lines.push(format!(
                    "active table capacity = {} WCU peak x {skew} partition head-room = {} WCU -> {n} partitions (one per 1,000 WCU)",
                    thousands(self.load.peak_wcu),
                    thousands(w)
                ));
                n
            }
        };
        self.p0 = p0;
        let most = self.input.max_queries_per_read;
        let n0 = self.load.head_room_shards;
        // More partitions only when no layout within the read budget fits.
        for partitions in p0..=p0.saturating_mul(8).max(p0 + 64) {
            if let Some(s) = self.holds(&KeyStrategy::Entity, partitions) {
                if let Some(m) = self.entity_floor(partitions) {
                    self.warnings.push(format!(
                        "`entity` keys hold the peak only with at least {} entities writing at once (check with --entities)",
                        thousands(m)
                    ));
                }
                self.layout_lines(&KeyStrategy::Entity, partitions, p0, s);
                return (KeyStrategy::Entity, partitions);
            }
            for n in n0..=most.max(n0) {
                let key = KeyStrategy::CalculatedSuffix { shards: n };
                if let Some(s) = self.holds(&key, partitions) {
                    self.layout_lines(&key, partitions, p0, s);
                    return (key, partitions);
                }
            }
        }
        // Nothing fits even with eight times the partitions: the largest
        // spread within the read budget, said plainly.
        let key = KeyStrategy::CalculatedSuffix {
            shards: most.max(n0).min(MAX_PLANNED_SHARDS),
        };
        let s = self.spread(&key, p0);
        self.warnings.push(format!(
            "no layout keeps every partition under 1,000 WCU at this peak: raise --max-queries-per-read or the capacity (the busiest partition is expected at {} WCU)",
            wcu(s.hottest_partition)
        ));
        self.layout_lines(&key, p0, p0, s);
        (key, p0)
    }

    /// With the entity count unknown, the fewest entities `entity` keys
    /// hold the peak with (when more than the rates imply).
    fn entity_floor(&self, partitions: u32) -> Option<u64> {
        if self.input.entities.is_some() || self.traffic.rest <= 0.0 {
            return None;
        }
        let ok = |m: u64| {
            let t = Traffic {
                others: Some(m),
                ..self.traffic
            };
            spread::spread(&KeyStrategy::Entity, &t, partitions).hottest_partition <= PARTITION_WCU
        };
        // The fewest others the rates allow (none bigger than the busiest).
        let least = ceil_u64(self.traffic.rest / self.traffic.hot.max(1.0)).max(1);
        if ok(least) {
            return None;
        }
        let (mut lo, mut hi) = (least, least);
        while !ok(hi) {
            lo = hi;
            hi = hi.saturating_mul(2);
            if hi > 20_000 {
                return Some(20_000);
            }
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if ok(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi + 1)
    }

    fn layout_lines(&mut self, key: &KeyStrategy, partitions: u32, p0: u32, s: Spread) {
        if partitions > p0 {
            self.lines.push(format!(
                "no layout within {} queries per read fits {p0} partitions: capacity raised to {partitions} partitions",
                self.input.max_queries_per_read
            ));
        }
        let mean = self.load.peak_wcu as f64 / f64::from(partitions);
        match key {
            KeyStrategy::Entity => self.lines.push(format!(
                "entity keys: busiest key {} WCU <= {} (1,000 / head-room {}); busiest of {partitions} partitions {} WCU (expected over {SAMPLES} placements) <= 1,000",
                wcu(s.hottest_key),
                wcu(self.key_limit()),
                self.input.safety_factor,
                wcu(s.hottest_partition)
            )),
            _ => {
                let n = key.shards();
                self.lines.push(format!(
                    "suffix keys per entity: fewest from {} up with every key <= {} WCU and the busiest of {partitions} partitions <= 1,000 WCU = {n}: busiest key {} WCU, busiest partition {} WCU (expected over {SAMPLES} placements)",
                    self.load.head_room_shards,
                    wcu(self.key_limit()),
                    wcu(s.hottest_key),
                    wcu(s.hottest_partition)
                ));
            }
        }
        self.lines.push(format!(
            "usable capacity = mean {} WCU / busiest {} WCU = {:.0}%",
            wcu(mean),
            wcu(s.hottest_partition),
            100.0 * (mean / s.hottest_partition).min(1.0)
        ));
    }

    /// The busiest partition's hours to 10 GB at the average rate: its
    /// share of the writes is its share of the data.
    fn fill_hours(&self, s: &Spread) -> f64 {
        let share = (s.hottest_partition / self.load.peak_wcu as f64).clamp(0.0, 1.0);
        PARTITION_BYTES
            / (self.input.avg_events_per_sec * self.input.avg_item_bytes as f64 * share)
            / 3600.0
    }

    /// Tables alive at once: those of the retention, the current one and
    /// the prebuilt next one.
    pub(super) fn tables_alive(&self, period: Period) -> u64 {
        let retention_h = self.input.retention.as_secs_f64() / 3600.0;
        ceil_u64(retention_h / average_hours(period)) + 2
    }

    /// The longest period within the busiest partition's fill time.
    pub(super) fn period(&mut self, key: &KeyStrategy, partitions: u32) -> Period {
        let s = self.spread(key, partitions);
        let fill = self.fill_hours(&s);
        let bytes = self.input.avg_events_per_sec * self.input.avg_item_bytes as f64;
        self.lines.push(format!(
            "busiest partition fill time = 10 GB / ({} events/s x {} B = {} B/s x its {:.1}% share) = {fill:.1} h",
            rate(self.input.avg_events_per_sec),
            thousands(self.input.avg_item_bytes),
            thousands(bytes.round() as u64),
            100.0 * (s.hottest_partition / self.load.peak_wcu as f64).min(1.0)
        ));
        let fitting = Period::ALL
            .iter()
            .rev()
            .find(|p| p.max_hours() as f64 <= fill)
            .copied();
        let period = fitting.unwrap_or(Period::Hour);
        match fitting {
            Some(p) => self.lines.push(format!(
                "period = longest of hour/6h/12h/day/week/month/quarter within {fill:.1} h = {} ({} h)",
                p.as_str(),
                p.max_hours()
            )),
            None => {
                self.lines.push(format!(
                    "period = hour, but one hour of the busiest partition ({:.1} GB) exceeds 10 GB",
                    bytes * 3600.0 * (s.hottest_partition / self.load.peak_wcu as f64) / 1e9
                ));
                self.warnings.push(
                    "even an hour of data overfills the busiest partition: tables will split; raise the capacity (more partitions) to spread the data".into(),
                );
            }
        }
        let alive = self.tables_alive(period);
        self.lines.push(format!(
            "tables alive = ceil({} retention / {}) + the current and the prebuilt one = {} (quota {})",
            days(self.input.retention),
            period.as_str(),
            thousands(alive),
            thousands(u64::from(self.input.table_quota))
        ));
        if alive > u64::from(self.input.table_quota) {
            self.warnings.push(format!(
                "{} period tables alive exceed the account's quota of {} tables per region (10,000 at most on request): shorten the retention or raise the capacity for a longer period",
                thousands(alive),
                thousands(u64::from(self.input.table_quota))
            ));
        } else if alive * 2 > u64::from(self.input.table_quota) {
            self.warnings.push(format!(
                "{} period tables alive take more than half the account's quota of {} tables per region",
                thousands(alive),
                thousands(u64::from(self.input.table_quota))
            ));
        }
        period
    }

    pub(super) fn evaluate(
        &self,
        key: &KeyStrategy,
        partitions: u32,
        period: Period,
    ) -> Evaluation {
        let s = self.spread(key, partitions);
        let mean = self.load.peak_wcu as f64 / f64::from(partitions.max(1));
        let fill = self.fill_hours(&s);
        Evaluation {
            hottest_key_wcu: round3(s.hottest_key),
            hottest_partition_wcu: round3(s.hottest_partition),
            mean_partition_wcu: round3(mean),
            usable_fraction: round3((mean / s.hottest_partition).min(1.0)),
            partition_fill_hours: round3(fill),
            queries_per_read: queries_per_read(key, period),
            tables_alive: self.tables_alive(period),
            holds_peak: s.hottest_key <= PARTITION_WCU + 1e-9
                && s.hottest_partition <= PARTITION_WCU + 1e-9,
            period_fits: period.max_hours() as f64 <= fill,
        }
    }

    pub(super) fn kinesis(&mut self) -> KinesisSizing {
        let i = self.input;
        let record = i.avg_record_bytes.unwrap_or(i.avg_item_bytes) as f64;
        let by_records = ceil_u32(i.peak_events_per_sec / KINESIS_SHARD_RECORDS).max(1);
        let by_bytes = ceil_u32(i.peak_events_per_sec * record / KINESIS_SHARD_BYTES).max(1);
        let shards = by_records.max(by_bytes);
        self.lines.push(format!(
            "Kinesis shards = max(ceil({} rec/s / 1,000), ceil({} rec/s x {record} B / 1 MiB)) = max({by_records}, {by_bytes}) = {shards}",
            rate(i.peak_events_per_sec),
            rate(i.peak_events_per_sec)
        ));
        KinesisSizing {
            shards_by_records: by_records,
            shards_by_bytes: by_bytes,
            shards,
        }
    }

    pub(super) fn cost(&mut self, capacity: u64, period: Period) -> Cost {
        let i = self.input;
        let prices = &i.prices;
        let retention_s = i.retention.as_secs_f64();
        let stored_gb = i.avg_events_per_sec
            * (i.avg_item_bytes as f64 + ITEM_STORAGE_OVERHEAD_BYTES)
            * retention_s
            / 1e9;
        let storage_usd = stored_gb * prices.storage_gb_month;
        self.lines.push(format!(
            "storage = {} events/s x ({} + 100 B overhead) x {retention_s:.0} s retention = {stored_gb:.1} GB x ${}/GB-month = ${storage_usd:.2}",
            rate(i.avg_events_per_sec),
            i.avg_item_bytes,
            prices.storage_gb_month
        ));
        let writes_per_month =
            i.avg_events_per_sec * self.load.wcu_per_item as f64 * HOURS_PER_MONTH * 3600.0;
        let on_demand_writes_usd = writes_per_month / 1e6 * prices.on_demand_write_per_million;
        let on_demand_usd = on_demand_writes_usd + storage_usd;
        self.lines.push(format!(
            "on-demand = {} events/s x {} WRU x {HOURS_PER_MONTH} h x 3600 = {:.1} M WRU x ${}/M = ${on_demand_writes_usd:.2} + storage = ${on_demand_usd:.2}/month",
            rate(i.avg_events_per_sec),
            self.load.wcu_per_item,
            writes_per_month / 1e6,
            prices.on_demand_write_per_million
        ));
        // The prebuilt and the cooling table hold the active capacity for a
        // while each period.
        let overlap = 1.0 + OVERLAP_HOURS / average_hours(period);
        let provisioned_writes_usd =
            capacity as f64 * overlap * HOURS_PER_MONTH * prices.provisioned_wcu_hour;
        let provisioned_usd = provisioned_writes_usd + storage_usd;
        self.lines.push(format!(
            "provisioned = {} WCU x {overlap:.3} (prebuilt and cooling tables, 30 min of each {}) x {HOURS_PER_MONTH} h x ${}/WCU-h = ${provisioned_writes_usd:.2} + storage = ${provisioned_usd:.2}/month (reads not included)",
            thousands(capacity),
            period.as_str(),
            prices.provisioned_wcu_hour
        ));
        Cost {
            stored_gb: round3(stored_gb),
            storage_usd,
            on_demand_writes_usd,
            provisioned_writes_usd,
            on_demand_usd,
            provisioned_usd,
        }
    }

    pub(super) fn decisions(
        &self,
        r: &Recommendation,
        e: &Evaluation,
        pricing: &Pricing,
    ) -> Vec<Decision> {
        let hot = thousands(self.load.hot_key_wcu);
        let head_room = wcu(self.load.hot_key_wcu as f64 * self.input.safety_factor);
        let n = r.key.shards();
        let strategy = match r.key {
            KeyStrategy::Entity => Decision {
                decision: "strategy",
                value: "entity".into(),
                reason: format!(
                    "the busiest entity peaks at {hot} WCU ({head_room} with head-room x{}), within the 1,000 WCU one partition key takes: one key per entity spreads the stream over the partitions",
                    self.input.safety_factor
                ),
                trade_off: "one entity stays on one partition key: an entity busier than 1,000 WCU would throttle (`calculated_suffix` spreads one entity; `time_bucket` also keeps one entity on one partition and reads one query per bucket)".into(),
            },
            _ => Decision {
                decision: "strategy",
                value: "calculated_suffix".into(),
                reason: format!(
                    "the busiest entity peaks at {hot} WCU ({head_room} with head-room x{}), over the 1,000 WCU one partition key takes: `entity` and `time_bucket` keep one entity on one partition and cannot hold it; `calculated_suffix` spreads it over {n} keys",
                    self.input.safety_factor
                ),
                trade_off: format!(
                    "a read of one entity queries all {n} suffixes of each table (`random_suffix` spreads the same way; `calculated_suffix` also lets an event's key be found from its id)"
                ),
            },
        };
        let usable = format!("{:.0}%", 100.0 * e.usable_fraction);
        let shards = match r.key {
            KeyStrategy::Entity => Decision {
                decision: "shards",
                value: "1".into(),
                reason: format!(
                    "no write shards: the busiest partition is expected at {} WCU of its 1,000",
                    wcu(e.hottest_partition_wcu)
                ),
                trade_off: format!(
                    "a read of one entity takes 1 query per table; {usable} of the table's capacity usable (mean {} WCU, busiest {} WCU)",
                    wcu(e.mean_partition_wcu),
                    wcu(e.hottest_partition_wcu)
                ),
            },
            _ => Decision {
                decision: "shards",
                value: n.to_string(),
                reason: format!(
                    "{n} keys per entity: the busiest key takes {} WCU (at most {} with head-room x{}), and the busiest of {} partitions is expected at {} WCU of its 1,000 ({})",
                    wcu(e.hottest_key_wcu),
                    wcu(self.key_limit()),
                    self.input.safety_factor,
                    r.table_partitions,
                    wcu(e.hottest_partition_wcu),
                    if n == self.load.head_room_shards {
                        "fewer keys would each take more than the head-room allows"
                    } else {
                        "fewer keys overload a partition"
                    }
                ),
                trade_off: format!(
                    "a read of one entity takes {n} queries per table (`tidemark query` runs 16 at a time); {usable} of the table's capacity usable (mean {} WCU, busiest {} WCU)",
                    wcu(e.mean_partition_wcu),
                    wcu(e.hottest_partition_wcu)
                ),
            },
        };
        let period = Decision {
            decision: "period",
            value: r.period.as_str().into(),
            reason: if e.period_fits {
                format!(
                    "the busiest of {} partitions fills 10 GB in {:.1} h at the average rate: the longest period within that",
                    r.table_partitions, e.partition_fill_hours
                )
            } else {
                format!(
                    "even an hour overfills the busiest partition ({:.1} h to 10 GB): the shortest period",
                    e.partition_fill_hours
                )
            },
            trade_off: format!(
                "up to {} tables alive over the {} retention, of the account's {}-table quota; a shorter period means more tables and more queries for long reads",
                thousands(e.tables_alive),
                days(self.input.retention),
                thousands(u64::from(self.input.table_quota))
            ),
        };
        let choice = &pricing.choice;
        let chosen = pricing
            .setups
            .iter()
            .find(|s| s.setup == choice.setup && s.history_class == choice.history_class);
        let class = choice.history_class.as_str();
        let billing = Decision {
            decision: "billing",
            value: r.billing.as_str().into(),
            reason: choice.reason.clone(),
            trade_off: match choice.setup {
                WriteSetup::ProvisionedFixed => format!(
                    "capacity is fixed per lifecycle state: set schema.tiers.active.write = {} (and prebuild, cooling); a peak above it is paced, not absorbed; history tables in {class}",
                    r.active_write_capacity
                ),
                WriteSetup::ProvisionedAutoscaled => format!(
                    "the active table scales between {} and {} WCU at {:.0}% utilisation (a tier's auto scaling); a sudden peak is paced until the capacity follows; history tables in {class}",
                    thousands(chosen.and_then(|s| s.min_write_capacity).unwrap_or(1)),
                    thousands(chosen.and_then(|s| s.max_write_capacity).unwrap_or(1)),
                    100.0 * self.input.autoscale_target
                ),
                WriteSetup::OnDemand => format!(
                    "no capacity to manage and nothing paid while idle, but each write costs more; a new table takes about 4,000 writes/s until it warms: set warm_write_units = {}, and a ceiling of {} write units/s caps the spend; history tables in {class}",
                    r.active_write_capacity.max(self.load.peak_wcu),
                    thousands(
                        chosen
                            .and_then(|s| s.max_write_units)
                            .unwrap_or(r.active_write_capacity)
                    )
                ),
            },
        };
        vec![strategy, shards, period, billing]
    }

    pub(super) fn verdicts(&self) -> Vec<StrategyVerdict> {
        let hot = self.load.hot_key_wcu as f64;
        let one_key_fits = hot <= self.key_limit() + 1e-9;
        let one = |name: &'static str, extra: &str| StrategyVerdict {
            strategy: name,
            spreads_one_entity: false,
            fits: one_key_fits,
            note: format!(
                "keeps one entity on one partition key{extra}: the busiest entity's {} WCU {} the {} WCU a key takes with head-room",
                wcu(hot),
                if one_key_fits { "fits" } else { "exceeds" },
                wcu(self.key_limit())
            ),
        };
        let suffix = |name: &'static str| StrategyVerdict {
            strategy: name,
            spreads_one_entity: true,
            fits: true,
            note: format!(
                "spreads each entity over its shards: at least {} for the busiest; reads query every shard",
                self.load.head_room_shards
            ),
        };
        vec![
            one("entity", ""),
            one("time_bucket", " (one shard per entity and bucket)"),
            suffix("calculated_suffix"),
            suffix("random_suffix"),
        ]
    }

    pub(super) fn review(
        &self,
        c: &CurrentLayout,
        r: &Recommendation,
        rec_eval: &Evaluation,
    ) -> ConfigReview {
        let partitions = c.table_partitions();
        let e = self.evaluate(&c.key, partitions, c.period);
        let mut d = Vec::new();
        let name = |k: &KeyStrategy| strategy_name(k).to_string();
        if name(&c.key) != name(&r.key) {
            let consequence = if !c.key.spreads_one_entity()
                && self.load.hot_key_wcu as f64 > self.key_limit()
            {
                format!(
                    "`{}` keeps the busiest entity ({} WCU) on one partition key, which takes 1,000 WCU: its writes are throttled at the peak",
                    name(&c.key),
                    thousands(self.load.hot_key_wcu)
                )
            } else {
                format!(
                    "reads of one entity take {} queries per table instead of {}",
                    e.queries_per_read, rec_eval.queries_per_read
                )
            };
            d.push(Difference {
                decision: "strategy",
                config: name(&c.key),
                recommended: name(&r.key),
                consequence,
            });
        }
        if c.key.shards() != r.key.shards() {
            d.push(Difference {
                decision: "shards",
                config: c.key.shards().to_string(),
                recommended: r.key.shards().to_string(),
                consequence: format!(
                    "busiest key {} WCU, busiest of its {} {} WCU (expected){}",
                    wcu(e.hottest_key_wcu),
                    partitions_text(partitions),
                    wcu(e.hottest_partition_wcu),
                    if e.holds_peak {
                        String::new()
                    } else {
                        ": over the 1,000 WCU limit, throttled at the peak".into()
                    }
                ),
            });
        }
        if c.period != r.period {
            d.push(Difference {
                decision: "period",
                config: c.period.as_str().into(),
                recommended: r.period.as_str().into(),
                consequence: if e.period_fits {
                    format!(
                        "up to {} tables alive instead of {}",
                        thousands(e.tables_alive),
                        thousands(rec_eval.tables_alive)
                    )
                } else {
                    format!(
                        "its busiest partition fills 10 GB in {:.1} h, within one {}: the table splits",
                        e.partition_fill_hours,
                        c.period.as_str()
                    )
                },
            });
        }
        let billing = match c.billing {
            Billing::Provisioned => BillingMode::Provisioned,
            Billing::OnDemand { .. } => BillingMode::OnDemand,
        };
        if c.write_capacity() < r.active_write_capacity || partitions != r.table_partitions {
            d.push(Difference {
                decision: "capacity",
                config: format!("{} WCU", thousands(c.write_capacity())),
                recommended: format!("{} WCU", thousands(r.active_write_capacity)),
                consequence: if c.write_capacity() < self.load.peak_wcu {
                    format!(
                        "below the {} WCU peak: writes are paced to it and the stream falls behind at the peak",
                        thousands(self.load.peak_wcu)
                    )
                } else {
                    format!(
                        "{}: the busiest expected at {} WCU",
                        partitions_text(partitions),
                        wcu(e.hottest_partition_wcu)
                    )
                },
            });
        }
        if billing != r.billing {
            d.push(Difference {
                decision: "billing",
                config: billing.as_str().into(),
                recommended: r.billing.as_str().into(),
                consequence: "see the cost figures".into(),
            });
        }
        ConfigReview {
            source: c.source.clone(),
            key: c.key.clone(),
            period: c.period,
            billing,
            active_write_capacity: c.write_capacity(),
            table_partitions: partitions,
            evaluation: e,
            differences: d,
        }
    }

    pub(super) fn final_warnings(&mut self, r: &Recommendation, e: &Evaluation) {
        if r.billing == BillingMode::Provisioned && r.active_write_capacity > TABLE_WRITE_QUOTA {
            self.warnings.push(format!(
                "{} WCU exceeds DynamoDB's default quota of 40,000 WCU per table: ask AWS to raise it",
                thousands(r.active_write_capacity)
            ));
        }
        if let Some(n) = self.input.table_partitions
            && r.table_partitions > n
        {
            self.warnings.push(format!(
                "{n} partitions cannot hold this peak with any layout within the read budget: the plan needs {}",
                r.table_partitions
            ));
        }
        if !e.holds_peak {
            self.warnings.push(
                "the recommended layout still overloads a key or a partition at the peak".into(),
            );
        }
    }
}
