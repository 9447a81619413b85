import { defineConfig } from "eslint/config";
import tseslint from "typescript-eslint";

/**
 * Lint rules of the app: typescript-eslint's recommended set over the sources
 * and tests. `npm run lint` prints each finding with its rule id, for example
 * `@typescript-eslint/no-unused-vars`.
 */
export default defineConfig({ ignores: ["dist/", "node_modules/", "bin/"] }, tseslint.configs.recommended);
