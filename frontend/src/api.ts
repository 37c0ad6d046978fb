/** Reads and writes the REST API with the page's Django session; POSTs carry the CSRF token from its cookie. */

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export class Api {
  constructor(private readonly root: string) {}

  /** Fetches `path` (relative to the API root, e.g. `runs/<id>/metrics/`) as JSON. */
  async get<T>(path: string, params?: URLSearchParams): Promise<T> {
    const query = params && [...params].length > 0 ? `?${params}` : "";
    return this.request<T>(`${this.root}${path}${query}`, { method: "GET" });
  }

  async post<T>(path: string, body: unknown = {}): Promise<T> {
    return this.request<T>(`${this.root}${path}`, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRFToken": cookie("csrftoken") ?? "" },
      body: JSON.stringify(body),
    });
  }

  private async request<T>(url: string, init: RequestInit): Promise<T> {
    const response = await fetch(url, {
      ...init,
      credentials: "same-origin",
      headers: { Accept: "application/json", ...init.headers },
    });
    if (!response.ok) {
      throw new ApiError(response.status, await errorText(response));
    }
    return (await response.json()) as T;
  }
}

async function errorText(response: Response): Promise<string> {
  try {
    const body = (await response.json()) as { detail?: unknown };
    if (typeof body.detail === "string") return body.detail;
    return JSON.stringify(body);
  } catch {
    return `${response.status} ${response.statusText}`;
  }
}

export function cookie(name: string): string | null {
  for (const part of document.cookie.split(";")) {
    const [key, ...value] = part.trim().split("=");
    if (key === name) return decodeURIComponent(value.join("="));
  }
  return null;
}

/** A short sentence for an error shown on the page. */
export function describeError(error: unknown): string {
  if (error instanceof ApiError) return `The server answered ${error.status}: ${error.message}`;
  if (error instanceof Error) return error.message;
  return String(error);
}
