// graphile-worker, the peer the delivery engine's database cost is judged against: no-op jobs
// on the same PostgreSQL, so that its CPU per job and the engine's CPU per message are read in
// one run (bench/delivery.sh runs this through server/examples/delivery_bench.rs).
//
//   node run.mjs prepare <connection string> <jobs>        schema, then <jobs> queued jobs
//   node run.mjs work <connection string> <concurrency> <batched: 0|1>
//
// `work` runs a worker until the queue is empty and prints one line: "jobs=N seconds=S cpu_us=U"
// (U: this process's CPU time while it worked).
// Batched: jobs fetched 10 × concurrency at a time (localQueue) and completions grouped
// (completeJobBatchDelay 0), graphile's own high-throughput settings.
import { Logger, run, runMigrations } from "graphile-worker";
import pg from "pg";

const [mode, connectionString, a, b] = process.argv.slice(2);
const quiet = new Logger(() => () => {});

if (mode === "prepare") {
  await runMigrations({ connectionString, logger: quiet });
  const client = new pg.Client({ connectionString });
  await client.connect();
  await client.query(
    "select graphile_worker.add_jobs(array(select row('noop', json_build_object('i', i), null, null, null, null, null, null)::graphile_worker.job_spec from generate_series(1, $1::int) i))",
    [Number(a)],
  );
  await client.end();
} else if (mode === "work") {
  const concurrency = Number(a);
  const batched = b === "1";
  const client = new pg.Client({ connectionString });
  await client.connect();
  const count = async () =>
    Number((await client.query("select count(*) from graphile_worker._private_jobs")).rows[0].count);
  const jobs = await count();
  let done = 0;
  const started = process.hrtime.bigint();
  const cpuAtStart = process.cpuUsage();
  const runner = await run({
    connectionString,
    concurrency,
    noHandleSignals: true,
    pollInterval: 1000,
    taskList: { noop: async () => { done++; } },
    preset: batched
      ? { worker: { localQueue: { size: concurrency * 10 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } }
      : {},
    // Silent: a log line per job would be most of what is measured.
    logger: quiet,
  });
  // Done when every job ran and its completion is committed (the row is gone).
  while (done < jobs || (await count()) > 0) {
    await new Promise((r) => setTimeout(r, 20));
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  await runner.stop();
  await client.end();
  const cpu = process.cpuUsage(cpuAtStart);
  console.log(`jobs=${jobs} seconds=${seconds.toFixed(3)} cpu_us=${cpu.user + cpu.system}`);
} else {
  console.error("usage: node run.mjs prepare <url> <jobs> | work <url> <concurrency> <0|1>");
  process.exit(2);
}
