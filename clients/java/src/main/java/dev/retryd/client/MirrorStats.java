package dev.retryd.client;

/**
 * Where the client's holds mirror stands, and what it saved: {@link RetrydClient#stats()}.
 *
 * @param synced a snapshot covering this client's dependency and tenant has arrived and the stream is up (calls
 *     admit locally)
 * @param stale the watch stream is down: known holds still refuse, every other call asks Admit
 * @param holds holds in the mirror (shared by the clients of one address; at most {@code maxHolds})
 * @param admitRpcs Admit RPCs sent
 * @param localAdmissions attempts the mirror admitted with no RPC
 * @param localRefusals attempts the mirror refused by a hold with no RPC
 * @param reportRpcs ReportOutcomes RPCs sent (batches of counts and probe outcomes)
 * @param reportedRequests first attempts sent in those batches (the budgets' deposits)
 */
public record MirrorStats(boolean synced, boolean stale, int holds, long admitRpcs, long localAdmissions,
    long localRefusals, long reportRpcs, long reportedRequests) {}
