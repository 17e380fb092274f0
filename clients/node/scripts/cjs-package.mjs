// dist/cjs holds CommonJS files inside a "type": "module" package: say so.
import { writeFileSync } from "node:fs";
writeFileSync(new URL("../dist/cjs/package.json", import.meta.url), '{ "type": "commonjs" }\n');
