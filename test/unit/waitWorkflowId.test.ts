import { waitWorkflowId } from '../../workflows/definitions';

describe('W1 each wait is its own workflow test-machine-wait/<machine>/<session>', () => {
  it('W1 names without "/" read as they are', () => {
    expect(waitWorkflowId('lab-1', 's1')).toBe('test-machine-wait/lab-1/s1');
    expect(waitWorkflowId('qa@lab:2', 'agent.7')).toBe('test-machine-wait/qa@lab:2/agent.7');
  });

  it('W1 a "/" in a machine or session name never makes two waits share an id', () => {
    const a = waitWorkflowId('lab', 'q/s1');
    const b = waitWorkflowId('lab/q', 's1');
    expect(a).not.toBe(b);
    expect(waitWorkflowId('lab%2Fq', 's1')).not.toBe(b);
  });
});
