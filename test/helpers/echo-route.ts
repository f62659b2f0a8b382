/**
 * The demo echo route of config/proxy.yaml as the `routes:` section of a proxy.yaml a test
 * writes: `POST /echo/:id` → `demo.echo`, the actor from `X-Actor-Id`, environment `dev`, target
 * `demo`/<id>. The permits the test authority issues for demo.echo bind exactly these facts.
 *
 * @example
 *   await writeFile(file, `upstream: ${upstream}\norganization: ${org}\n${echoRoutesYaml('shadow')}`);
 */
export function echoRoutesYaml(mode: string = 'enforce'): string {
  return `routes:
  - name: echo
    match: { method: POST, path: /echo/:id }
    action_type: demo.echo
    mode: ${mode}
    facts:
      actor_id: { header: X-Actor-Id }
      environment: { const: dev }
      target: { type: { const: demo }, id: { path: id } }
`;
}
