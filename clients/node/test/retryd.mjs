// A real `retryd serve` for the tests (RETRYD_BIN, default target/debug/retryd of this checkout)
// on a free loopback port; resolves once it accepts connections.
import { spawn } from "node:child_process";
import net from "node:net";
import { fileURLToPath } from "node:url";

export const bin = process.env.RETRYD_BIN ?? fileURLToPath(new URL("../../../target/debug/retryd", import.meta.url));

export async function startRetryd(...extra) {
  const port = await new Promise((r) => { const s = net.createServer().listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => r(p)); }); });
  const addr = `127.0.0.1:${port}`;
  const proc = spawn(bin, ["serve", "--listen", addr, "--metrics-listen", "off", "--log-level", "warn", ...extra], { stdio: "ignore" });
  for (let i = 0; ; i++) {
    const ok = await new Promise((r) => { const c = net.connect(port, "127.0.0.1", () => { c.end(); r(true); }); c.on("error", () => r(false)); });
    if (ok) return { addr, proc };
    if (i > 200) { proc.kill("SIGKILL"); throw new Error("retryd did not start"); }
    await new Promise((r) => setTimeout(r, 50));
  }
}
