/**
 * What the app's MCP tools do (docs/mcp.md in the platform). Register a tool
 * with the platform (`slipway mcp register-tool --app {{APP}} --name word_count
 * --target /tools/word_count ...`) and the platform's MCP endpoint calls
 * `/tools/<name>` here with the tool's arguments; app.ts has already checked
 * the service token. Add a tool by adding a function to `TOOLS`; a name
 * without one is `404` (the platform's tool call then fails, saying so).
 */

/** `/tools/<name>`, the name as the platform allows it. */
export const TOOL_PATH = /^\/tools\/([a-z][a-z0-9_.-]{0,63})$/;

type Tool = (args: Record<string, unknown>) => Record<string, unknown>;

const TOOLS: Record<string, Tool> = {
  /** Answers its arguments as they came: a tool to wire a client up with. */
  echo: (args) => ({ arguments: args }),
  /** Counts the words, characters and lines of `text`. */
  word_count: (args) => {
    const text = typeof args.text === "string" ? args.text : "";
    const words = text.trim() === "" ? 0 : text.trim().split(/\s+/u).length;
    const lines = text === "" ? 0 : text.split(/\r\n|\r|\n/).length;
    return { words, characters: [...text].length, lines };
  },
};

/** Runs a tool: its answer with `ok: true`, or undefined when this app has no such tool. */
export function runTool(name: string, args: Record<string, unknown>): Record<string, unknown> | undefined {
  const tool = Object.hasOwn(TOOLS, name) ? TOOLS[name] : undefined;
  return tool ? { tool: name, ok: true, ...tool(args) } : undefined;
}
