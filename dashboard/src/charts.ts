// ECharts, with only the charts and components the pages use (tree-shaken),
// and a registry of the live instances: tests read `window.__dial.charts`.
import * as echarts from 'echarts/core';
import { BarChart, HeatmapChart, LineChart, LinesChart, ParallelChart, ScatterChart } from 'echarts/charts';
import {
  DataZoomComponent, GridComponent, LegendComponent, MarkLineComponent, MarkPointComponent,
  ParallelComponent, TitleComponent, TooltipComponent, VisualMapComponent,
} from 'echarts/components';
import { CanvasRenderer } from 'echarts/renderers';

echarts.use([
  BarChart, HeatmapChart, LineChart, LinesChart, ParallelChart, ScatterChart,
  DataZoomComponent, GridComponent, LegendComponent, MarkLineComponent, MarkPointComponent,
  ParallelComponent, TitleComponent, TooltipComponent, VisualMapComponent, CanvasRenderer,
]);

export type Chart = echarts.ECharts;
export type Option = echarts.EChartsCoreOption;

export const charts: Record<string, Chart> = {};

declare global {
  interface Window {
    __dial: { charts: Record<string, Chart>; [k: string]: unknown };
  }
}
window.__dial = { charts };

// Draws `option` into `el` as chart `name` (a new instance the first time,
// the whole option replaced after). Animations are off: charts redraw often
// during a live study, and tests read them right after.
export function draw(name: string, el: HTMLElement, option: Option): Chart {
  let c = charts[name];
  if (c && c.getDom() !== el) {
    c.dispose();
    c = undefined as unknown as Chart;
  }
  if (!c) c = charts[name] = echarts.init(el);
  c.setOption({ animation: false, ...option }, { notMerge: true, lazyUpdate: false });
  return c;
}

export function disposeAll(): void {
  for (const [name, c] of Object.entries(charts)) {
    c.dispose();
    delete charts[name];
  }
}

window.addEventListener('resize', () => {
  for (const c of Object.values(charts)) c.resize();
});
